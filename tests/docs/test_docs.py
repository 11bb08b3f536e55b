"""README.md and docs/*.md run as tests: each document's blocks in order, as written (relative
paths, defaults and all), in a fresh working directory against the test stack.

`test_every_block_is_run_or_skipped_with_a_reason` lists every block (`pytest -rA` or `-s`
shows the list) and needs no stack; `test_the_blocks_of_a_doc_run_as_written` runs one
document's blocks.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from unittest import SkipTest

import pytest

from rlmesh_stream.schemas.connection.config import StreamConfig
from tests.docs.doc_runner import (
    CWD_KEY,
    DOCS,
    ENV_KEY,
    ROOT,
    Block,
    block_environment,
    inventory,
    note_skipped,
    parse,
)

RUNNABLE = [doc for doc in DOCS if any(entry.runs for entry in inventory(doc))]


def test_every_block_is_run_or_skipped_with_a_reason() -> None:
    entries = [entry for doc in DOCS for entry in inventory(doc)]
    print("\n".join(str(entry) for entry in entries))
    unexplained = [str(entry) for entry in entries if entry.reason == ""]
    assert not unexplained, ("blocks neither run nor skipped with a reason:\n"
                             + "\n".join(unexplained))
    docs_with_blocks = {entry.doc for entry in entries}
    assert "README.md" in docs_with_blocks
    assert any(entry.runs for entry in entries)


@pytest.mark.parametrize("doc", RUNNABLE, ids=[str(d.relative_to(ROOT)) for d in RUNNABLE])
def test_the_blocks_of_a_doc_run_as_written(
    doc: Path, stream_config: StreamConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = {
        "RLMESH_STREAM_BOOTSTRAP": stream_config.bootstrap,
        "RLMESH_STREAM_REGISTRY_URL": stream_config.registry_url,
        "RLMESH_STREAM_TOPIC_PREFIX": stream_config.topic_prefix,
    }
    # Python blocks run in this process: they see the same directory and settings.
    monkeypatch.chdir(tmp_path)
    for key, value in settings.items():
        monkeypatch.setenv(key, value)
    document = parse(doc)
    document.namespace[CWD_KEY] = tmp_path
    shell_env = block_environment(os.environ, Path(sys.executable).parent, settings)
    document.namespace[ENV_KEY] = shell_env

    def export(**names: str) -> None:  # as the shell's `export`: later blocks, both kinds
        shell_env.update(names)
        for key, value in names.items():
            monkeypatch.setenv(key, value)

    document.namespace["export"] = export
    ran = []
    for example in document:
        try:
            example.evaluate()  # a failing block raises BlockFailed: its line, its output
        except SkipTest:
            note_skipped(document.namespace)
            continue
        if isinstance(example.parsed, Block):
            ran.append(example.line)
    # What ran is what the inventory lists as run: the skips were read alike.
    assert ran == [entry.line for entry in inventory(doc) if entry.runs_here(shell_env)]


def test_the_stack_doc_gives_each_jvms_heap_as_started() -> None:
    from rlmesh_stream.infra import kafka, registry

    text = (ROOT / "docs" / "stack.md").read_text(encoding="utf-8")
    assert f"Kafka runs with `{kafka.HEAP}`" in text
    assert f"the registry with\n`{registry.HEAP}`" in text or (
        f"the registry with `{registry.HEAP}`" in text)

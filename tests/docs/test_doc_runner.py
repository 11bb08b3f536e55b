"""The doc runner itself: what it runs, what it skips and why, and how a failure reads."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any
from unittest import SkipTest

import pytest

from tests.docs.doc_runner import (
    CWD_KEY,
    ENV_KEY,
    BlockFailed,
    inventory,
    note_skipped,
    parse,
)

DOC = '''# A doc

```sh
echo one > one.txt
```

<!-- skip: next "a server: runs until stopped" -->
```sh
sleep 1000
```

```text
output, with no reason given
```

<!-- invisible-code-block: python
written = open("one.txt").read()
-->

```python
assert written == "one\\n"
```
'''


def _doc(tmp_path: Path, text: str = DOC) -> Path:
    path = tmp_path / "doc.md"
    path.write_text(text, encoding="utf-8")
    return path


def test_the_inventory_names_each_block_run_skipped_or_unexplained(tmp_path: Path) -> None:
    entries = inventory(_doc(tmp_path))
    assert [(e.line, e.language, e.invisible, e.reason) for e in entries] == [
        (3, "sh", False, None),
        (8, "sh", False, "a server: runs until stopped"),
        (12, "text", False, ""),
        (16, "python", True, None),
        (20, "python", False, None),
    ]
    assert str(entries[2]).endswith("[text] NOT RUN, AND NO REASON GIVEN")


def test_a_skip_whose_reason_is_not_a_quoted_string_is_refused(tmp_path: Path) -> None:
    doc = _doc(tmp_path, "<!-- skip: next because -->\n```sh\ntrue\n```\n")
    with pytest.raises(ValueError, match="must be a quoted string"):
        inventory(doc)


def test_blocks_share_a_directory_and_a_failing_line_fails_its_block(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    text = DOC.replace("```text\noutput, with no reason given\n```\n", "") + (
        "\n```sh\ncat one.txt\nfalse\necho never\n```\n")
    document = parse(_doc(tmp_path, text))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    document.namespace[CWD_KEY], document.namespace[ENV_KEY] = work, dict(os.environ)
    examples = list(document)
    for example in examples[:-1]:
        try:
            example.evaluate()
        except Exception as exc:  # the skipped block
            assert type(exc).__name__ == "SkipTest"
    with pytest.raises(BlockFailed) as failed:
        examples[-1].evaluate()
    fence_line = text.splitlines().index("cat one.txt")  # the line before it, 1-based
    message = str(failed.value)
    assert f"doc.md:{fence_line}: exit 1 in {work}" in message
    assert message.endswith("--- stdout\none\n--- stderr\n")  # `echo never` never ran


def _run_all(doc: Path, work: Path, env: dict[str, str]) -> dict[str, Any]:
    """Evaluate every block of `doc` in `work` (a skipped one passes); the namespace."""
    document = parse(doc)
    document.namespace[CWD_KEY], document.namespace[ENV_KEY] = work, env
    for example in document:
        try:
            example.evaluate()
        except SkipTest:
            note_skipped(document.namespace)
    return document.namespace


OUTPUT_DOC = '''```sh
echo first; echo second; echo third
```

```output
first
...
third
```
'''


def test_an_output_block_is_what_the_block_before_printed(tmp_path: Path) -> None:
    _run_all(_doc(tmp_path, OUTPUT_DOC), tmp_path, dict(os.environ))
    assert [(e.language, e.reason) for e in inventory(_doc(tmp_path, OUTPUT_DOC))] == [
        ("sh", None), ("output", None)]

    other = OUTPUT_DOC.replace("...\nthird\n", "...\nfourth\n")
    with pytest.raises(BlockFailed, match=r"doc.md:\d+: the block before printed other output"):
        _run_all(_doc(tmp_path, other), tmp_path, dict(os.environ))


def test_an_output_block_after_a_skipped_block_must_be_skipped_too(tmp_path: Path) -> None:
    doc = _doc(tmp_path, '<!-- skip: next "not here" -->\n' + OUTPUT_DOC)
    assert [e.reason for e in inventory(doc)] == ["not here", ""]


INTERPRETER_DOC = '''<!-- interpreter: DOC_RUNNER_PYTHON -->
```python
import sys
print(sys.executable)
```

```output
...python...
```
'''


def test_a_block_for_another_python_runs_in_it_and_is_skipped_while_it_is_unset(
    tmp_path: Path,
) -> None:
    doc = _doc(tmp_path, INTERPRETER_DOC)
    entries = inventory(doc)
    assert [(e.language, e.requires) for e in entries] == [
        ("python", "DOC_RUNNER_PYTHON"), ("output", "DOC_RUNNER_PYTHON")]

    namespace = _run_all(doc, tmp_path, {**os.environ, "DOC_RUNNER_PYTHON": sys.executable})
    assert namespace["__doc_stdout__"] == f"{sys.executable}\n"  # not this process's print

    unset = {k: v for k, v in os.environ.items() if k != "DOC_RUNNER_PYTHON"}
    assert not any(e.runs_here(unset) for e in entries)
    document = parse(doc)
    document.namespace[CWD_KEY], document.namespace[ENV_KEY] = tmp_path, unset
    examples = list(document)
    examples[0].evaluate()  # the directive
    with pytest.raises(SkipTest, match="DOC_RUNNER_PYTHON is unset"):
        examples[1].evaluate()


def test_a_sql_block_runs_in_duckdb_and_keeps_its_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    (tmp_path / "rows.csv").write_text("n\n1\n2\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    doc = _doc(tmp_path, "```sql\nSELECT sum(n) AS total FROM 'rows.csv';\n```\n")

    namespace = _run_all(doc, tmp_path, dict(os.environ))

    assert namespace["sql_result"].to_pylist() == [{"total": 3}]


def test_an_interpreter_before_a_skipped_block_is_spent_with_it(tmp_path: Path) -> None:
    doc = _doc(tmp_path, INTERPRETER_DOC.replace(
        "```python", '<!-- skip: next "not here" -->\n```python', 1).replace(
        "```output\n...python...\n```\n", "```python\nran_here = True\n```\n"))

    namespace = _run_all(doc, tmp_path, {**os.environ, "DOC_RUNNER_PYTHON": "/nonexistent"})

    assert namespace["ran_here"] is True  # in this process, not in DOC_RUNNER_PYTHON

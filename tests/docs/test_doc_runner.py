"""The doc runner itself: what it runs, what it skips and why, and how a failure reads."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.docs.doc_runner import CWD_KEY, ENV_KEY, BlockFailed, inventory, parse

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

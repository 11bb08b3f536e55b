"""The docs as tests: every fenced block of README.md and docs/*.md, run as written or skipped
with the reason the doc gives beside it.

Sybil parses the Markdown (fenced blocks, HTML comments) and carries one namespace per document;
this module adds what Sybil lacks for these docs: an evaluator for ```sh blocks (bash, in the
document's working directory, `-e -o pipefail` so any failing line fails the block), one for
```python blocks (executed in the document's namespace, in-process) and an inventory that names
each block as run or skipped with its reason.

What a doc writes beside a block:
- nothing: a ```sh or ```python block runs as written; a block in any other language (output,
  SQL, a synopsis with placeholders) must say why it is not run;
- `<!-- skip: next "reason" -->` (Sybil's own skip syntax; the reason is a Python string) on
  the line before a block: not run, for that reason; `skip: start "reason"` / `skip: end`
  around several;
- `<!-- invisible-code-block: python ... -->` (Sybil's): set-up a reader does not need to see
  (a training log to join with), run in order with the visible blocks; its `export(NAME=value)`
  sets a variable for the shell blocks after it, as the shell's `export` would.

Blocks of one document run in order in one working directory, so a block may use what an
earlier one wrote; each document gets its own directory and topic prefix.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sybil import Document, Example, Region, Sybil
from sybil.evaluators.skip import Skipper
from sybil.parsers.abstract.lexers import LexerCollection
from sybil.parsers.markdown import SkipParser
from sybil.parsers.markdown.lexers import DirectiveInHTMLCommentLexer, RawFencedCodeBlockLexer

ROOT = Path(__file__).resolve().parents[2]
DOCS: list[Path] = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# The languages a user runs as written; any other block is shown, never run.
RUN_LANGUAGES = frozenset({"sh", "python"})
# One block's bound: the longest (an offline consume of a doc's small fleet) takes seconds;
# a block that hangs (a command that waits for input or runs live) fails here instead.
BLOCK_TIMEOUT_S = 300.0

# Keys in a document's namespace that the evaluators read.
CWD_KEY = "__doc_cwd__"
ENV_KEY = "__doc_env__"


@dataclass(frozen=True)
class Block:
    """One fenced (or invisible) block: its language and source."""

    language: str
    source: str
    invisible: bool


class BlockFailed(AssertionError):
    """A block that ran and failed: the doc and line, the source and what it printed."""


class BlockParser:
    """Every fenced block of a Markdown document, whatever its language, and Sybil's
    `invisible-code-block` comments, each evaluated by language."""

    def __init__(self) -> None:
        self.lexers = LexerCollection([
            RawFencedCodeBlockLexer(
                info_pattern=re.compile(r"(?P<language>[^\n`]*)$\n", re.MULTILINE),
                mapping={"language": "language", "source": "source"}),
            DirectiveInHTMLCommentLexer(
                directive=r"invisible-code-block", arguments=r".+",
                mapping={"arguments": "language", "source": "source"}),
        ])

    def __call__(self, document: Document) -> Iterator[Region]:
        for lexed in self.lexers(document):
            invisible = document.text.startswith("<!--", lexed.start) or (
                document.text[lexed.start:lexed.end].lstrip().startswith("<!--"))
            block = Block(str(lexed.lexemes["language"]).strip(), str(lexed.lexemes["source"]),
                          invisible)
            yield Region(lexed.start, lexed.end, block, evaluate_block)


def evaluate_block(example: Example) -> None:
    block: Block = example.parsed
    where = f"{_name(Path(example.path))}:{example.line}"
    if block.language == "sh":
        _run_shell(example, block, where)
    elif block.language == "python":
        code = compile(block.source, where, "exec")
        exec(code, example.namespace)
    else:
        raise BlockFailed(f"{where}: a ```{block.language or '(no language)'} block is "
                          "neither run nor marked `<!-- skip: next \"reason\" -->`")


def _run_shell(example: Example, block: Block, where: str) -> None:
    cwd: Path = example.namespace[CWD_KEY]
    env: Mapping[str, str] = example.namespace[ENV_KEY]
    try:
        done = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", block.source], cwd=cwd,
                              env=dict(env), capture_output=True, text=True,
                              timeout=BLOCK_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        raise BlockFailed(f"{where}: still running after {BLOCK_TIMEOUT_S:.0f} s\n"
                          f"{block.source}\n{exc.stdout or ''}{exc.stderr or ''}") from None
    if done.returncode != 0:
        raise BlockFailed(f"{where}: exit {done.returncode} in {cwd}\n$ {block.source}\n"
                          f"--- stdout\n{done.stdout}--- stderr\n{done.stderr}")


SYBIL = Sybil(parsers=[SkipParser(), BlockParser()])


def parse(doc: Path) -> Document:
    return SYBIL.parse(doc)


# -- the inventory ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    """What the runner does with one block: run it, or skip it for `reason`."""

    doc: str
    line: int
    language: str
    invisible: bool
    reason: str | None  # None: run

    @property
    def runs(self) -> bool:
        return self.reason is None

    def __str__(self) -> str:
        what = ("run" if self.runs else f"skipped: {self.reason}" if self.reason
                else "NOT RUN, AND NO REASON GIVEN")
        kind = f"{'invisible ' if self.invisible else ''}{self.language or 'text'}"
        return f"{self.doc}:{self.line} [{kind}] {what}"


def inventory(doc: Path) -> list[Entry]:
    """Every block of `doc` in order, with the skip in force over it (Sybil's `skip: next`,
    `skip: start` ... `skip: end`), read from the document without running anything."""
    entries: list[Entry] = []
    pending: str | None = None  # a `skip: next` waiting for its block
    open_range: str | None = None  # a `skip: start` not yet ended
    name = _name(doc)
    for example in parse(doc):
        if isinstance(example.region.evaluator, Skipper):
            action, reason = example.parsed
            text = _reason(reason, name, example.line)
            if action == "next":
                pending = text
            elif action == "start":
                open_range = text
            else:
                open_range = None
            continue
        block: Block = example.parsed
        reason = pending or open_range
        pending = None
        if reason is None and block.language not in RUN_LANGUAGES:
            reason = ""  # neither run nor given a reason: reported as such
        entries.append(Entry(name, example.line, block.language, block.invisible, reason))
    return entries


def _name(doc: Path) -> str:
    """A document as messages name it: relative to the repository when inside it."""
    return str(doc.relative_to(ROOT)) if doc.is_relative_to(ROOT) else str(doc)


def _reason(expression: str | None, doc: str, line: int) -> str:
    """The reason a skip gives: a Python string literal, as Sybil evaluates it; a skip with
    none (or an empty one) gives the empty reason, which the inventory's test refuses."""
    if not expression:
        return ""
    try:
        value = ast.literal_eval(expression.strip())
    except (ValueError, SyntaxError):
        raise ValueError(f"{doc}:{line}: a skip's reason must be a quoted string, "
                         f"not {expression!r}") from None
    return str(value).strip()


def block_environment(base: Mapping[str, str], bin_dir: Path, settings: Mapping[str, str]
                      ) -> dict[str, Any]:
    """The environment a user's shell would have: the project's commands on PATH and the
    stack's settings (what the docs say to export)."""
    env = dict(base)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env.update(settings)
    return env

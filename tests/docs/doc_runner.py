"""The docs as tests: every fenced block of README.md and docs/*.md, run as written or skipped
with the reason the doc gives beside it.

Sybil parses the Markdown (fenced blocks, HTML comments) and carries one namespace per document;
this module adds what Sybil lacks for these docs: an evaluator for ```sh blocks (bash, in the
document's working directory, `-e -o pipefail` so any failing line fails the block), one for
```python blocks (executed in the document's namespace, in-process), one for ```sql blocks
(DuckDB, in-process), one for ```output blocks (what the block before printed) and an
inventory that names each block as run or skipped with its reason.

What a doc writes beside a block:
- nothing: a ```sh, ```python or ```sql block runs as written; a block in any other language
  (a synopsis with placeholders, another engine's SQL) must say why it is not run;
- an ```output block right after a block that runs: what that block printed (its stdout),
  compared as doctest compares (`...` stands for any text, over lines too), so the output a
  doc shows is the output the command gives;
- a ```sql block is run by DuckDB in the document's working directory; its result is printed
  (for an ```output block) and kept as `sql_result` (a pyarrow Table) for a check after it;
- `<!-- interpreter: VAR -->` on the line before a ```python block: it runs as a script in
  the Python that the environment variable VAR names (a venv holding what it imports that the
  test environment does not, e.g. torch), in the document's directory and environment (the
  repository on PYTHONPATH); skipped, saying so, while VAR is unset;
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
import contextlib
import doctest
import io
import os
import re
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import SkipTest

from sybil import Document, Example, Region, Sybil
from sybil.evaluators.skip import Skipper
from sybil.parsers.abstract.lexers import LexerCollection
from sybil.parsers.markdown import SkipParser
from sybil.parsers.markdown.lexers import DirectiveInHTMLCommentLexer, RawFencedCodeBlockLexer

ROOT = Path(__file__).resolve().parents[2]
DOCS: list[Path] = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# The languages a user runs as written (and `output`, checked against what the block before
# printed); any other block is shown, never run.
RUN_LANGUAGES = frozenset({"sh", "python", "sql", "output"})
# One block's bound: the longest (an offline consume of a doc's small fleet) takes seconds;
# a block that hangs (a command that waits for input or runs live) fails here instead.
BLOCK_TIMEOUT_S = 300.0

# Keys in a document's namespace that the evaluators read.
CWD_KEY = "__doc_cwd__"
ENV_KEY = "__doc_env__"
OUT_KEY = "__doc_stdout__"  # what the last block run printed; None after a skipped one
INTERPRETER_KEY = "__doc_interpreter__"  # the variable an `interpreter:` directive named


@dataclass(frozen=True)
class Block:
    """One fenced (or invisible) block: its language and source."""

    language: str
    source: str
    invisible: bool


class BlockFailed(AssertionError):
    """A block that ran and failed: the doc and line, the source and what it printed."""


@dataclass(frozen=True)
class Interpreter:
    """An `<!-- interpreter: VAR -->` directive: the next ```python block runs in $VAR."""

    variable: str


class InterpreterParser:
    """`<!-- interpreter: VAR -->` comments."""

    def __init__(self) -> None:
        self.lexers = LexerCollection([DirectiveInHTMLCommentLexer(
            directive=r"interpreter", arguments=r"[A-Za-z_][A-Za-z0-9_]*")])

    def __call__(self, document: Document) -> Iterator[Region]:
        for lexed in self.lexers(document):
            yield Region(lexed.start, lexed.end,
                         Interpreter(str(lexed.lexemes["arguments"]).strip()),
                         _set_interpreter)


def _set_interpreter(example: Example) -> None:
    example.namespace[INTERPRETER_KEY] = example.parsed.variable


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
    namespace = example.namespace
    interpreter = namespace.pop(INTERPRETER_KEY, None)
    if block.language == "output":
        _check_output(namespace.get(OUT_KEY), block.source, where)
        return
    namespace[OUT_KEY] = None  # until this block has run
    if interpreter is not None and block.language != "python":
        raise BlockFailed(f"{where}: `interpreter: {interpreter}` is for a ```python block")
    if block.language == "sh":
        namespace[OUT_KEY] = _run(["bash", "-e", "-o", "pipefail", "-c", block.source],
                                  namespace, block, where)
    elif block.language == "python" and interpreter is not None:
        python = namespace[ENV_KEY].get(interpreter)
        if not python:
            raise SkipTest(f"{interpreter} is unset: it names the Python this block needs")
        # one thread for torch (and any OpenMP pool): on the shared 2-core machine, its
        # default pool made each of the recipe's gradient steps take 0.25 s, not milliseconds
        namespace[OUT_KEY] = _run([python, "-c", block.source], namespace, block, where,
                                  {"OMP_NUM_THREADS": "1"})
    elif block.language == "python":
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(compile(block.source, where, "exec"), namespace)
        namespace[OUT_KEY] = printed.getvalue()
    elif block.language == "sql":
        import duckdb

        result = duckdb.connect().sql(block.source)
        namespace["sql_result"] = result.to_arrow_table() if result is not None else None
        namespace[OUT_KEY] = "" if result is None else f"{result}"
    else:
        raise BlockFailed(f"{where}: a ```{block.language or '(no language)'} block is "
                          "neither run nor marked `<!-- skip: next \"reason\" -->`")


def note_skipped(namespace: dict[str, Any]) -> None:
    """A block was skipped: an output block after it has nothing to compare, and an
    `interpreter:` before it is spent."""
    namespace[OUT_KEY] = None
    namespace.pop(INTERPRETER_KEY, None)


def _run(argv: list[str], namespace: dict[str, Any], block: Block, where: str,
         settings: Mapping[str, str] | None = None) -> str:
    """Run `argv` in the document's directory and environment (plus `settings` it does not
    set); what it printed."""
    cwd: Path = namespace[CWD_KEY]
    env = {**(settings or {}), **namespace[ENV_KEY]}
    try:
        done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=BLOCK_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        raise BlockFailed(f"{where}: still running after {BLOCK_TIMEOUT_S:.0f} s\n"
                          f"{block.source}\n--- stdout\n{_tail(exc.stdout)}--- stderr\n"
                          f"{_tail(exc.stderr)}") from None
    if done.returncode != 0:
        raise BlockFailed(f"{where}: exit {done.returncode} in {cwd}\n$ {block.source}\n"
                          f"--- stdout\n{_tail(done.stdout)}--- stderr\n{_tail(done.stderr)}")
    return done.stdout


def _tail(text: str | bytes | None, limit: int = 4000) -> str:
    """The end of what a block printed (a progress bar can print megabytes)."""
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    text = text or ""
    return text if len(text) <= limit else f"[... {len(text) - limit} characters]{text[-limit:]}"


def _check_output(got: str | None, want: str, where: str) -> None:
    """BlockFailed unless `got` is `want`, as doctest compares (`...`: any text); skipped
    when the block before did not run (the inventory requires a skip beside it then)."""
    if got is None:
        raise SkipTest(f"{where}: the block before this output did not run")
    flags = doctest.ELLIPSIS
    checker = doctest.OutputChecker()
    if not checker.check_output(want, got, flags):
        example = doctest.Example("", want)
        raise BlockFailed(f"{where}: the block before printed other output\n"
                          + checker.output_difference(example, got, flags))


SYBIL = Sybil(parsers=[SkipParser(), InterpreterParser(), BlockParser()])


def parse(doc: Path) -> Document:
    return SYBIL.parse(doc)


# -- the inventory ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    """What the runner does with one block: run it (in the Python `requires` names, if
    set: skipped while that variable is unset), or skip it for `reason`."""

    doc: str
    line: int
    language: str
    invisible: bool
    reason: str | None  # None: run
    requires: str | None = None

    @property
    def runs(self) -> bool:
        return self.reason is None

    def runs_here(self, environ: Mapping[str, str]) -> bool:
        return self.runs and (self.requires is None or bool(environ.get(self.requires)))

    def __str__(self) -> str:
        what = ("run" if self.runs else f"skipped: {self.reason}" if self.reason
                else "NOT RUN, AND NO REASON GIVEN")
        if self.runs and self.language == "output":
            what = "checked against what the block before printed"
        if self.runs and self.requires:
            what += (f" (skipped while ${self.requires} is unset)" if self.language == "output"
                     else f" (in the Python ${self.requires} names; skipped while it is unset)")
        kind = f"{'invisible ' if self.invisible else ''}{self.language or 'text'}"
        return f"{self.doc}:{self.line} [{kind}] {what}"


def inventory(doc: Path) -> list[Entry]:
    """Every block of `doc` in order, with the skip in force over it (Sybil's `skip: next`,
    `skip: start` ... `skip: end`), read from the document without running anything."""
    entries: list[Entry] = []
    pending: str | None = None  # a `skip: next` waiting for its block
    open_range: str | None = None  # a `skip: start` not yet ended
    interpreter: str | None = None  # an `interpreter:` waiting for its block
    name = _name(doc)
    for example in parse(doc):
        if isinstance(example.parsed, Interpreter):
            interpreter = example.parsed.variable
            continue
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
        requires, pending, interpreter = interpreter, None, None
        if reason is None and block.language not in RUN_LANGUAGES:
            reason = ""  # neither run nor given a reason: reported as such
        if block.language == "output" and reason is None:
            before = entries[-1] if entries else None
            if before is None or not before.runs or before.language == "output":
                reason = ""  # output of nothing that runs: it must be skipped too
            else:
                requires = before.requires
        entries.append(Entry(name, example.line, block.language, block.invisible, reason,
                             requires))
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
    stack's settings (what the docs say to export). The commands run this checkout's code
    (its `rlmesh_stream` first on PYTHONPATH), whichever checkout the venv was installed
    from, as the Python blocks run in-process do; a Python named by `interpreter:` finds
    the project there too."""
    env = dict(base)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.update(settings)
    return env

"""The house rules a reader relies on without reading every module:
- a sink is called through its contract (`consumers.sinks.Sink`), never probed with
  `getattr`/`hasattr` for one of its methods: a hook a sink does not need is the
  contract's no-op;
- every exception class of ours derives from the one root,
  `rlmesh_stream.schemas.errors.RlmeshStreamError`, so an embedding program can catch
  "any rlmesh-stream error";
- a comment or docstring that cites a section of a page in docs/ (`docs/x.md, "Heading"`
  or `docs/x.md#anchor`) cites one the page has: sections move and go, and a citation of
  one that went sends the reader nowhere.
"""

from __future__ import annotations

import ast
import importlib
import io
import re
import tokenize
from pathlib import Path

from rlmesh_stream.consumers.sinks import Sink
from rlmesh_stream.schemas.errors import RlmeshStreamError
from tests.architecture.test_import_graph import MODULES, ROOT

# What the runtime may call or read on a sink: every public name of the contract.
SINK_NAMES = frozenset(name for name in dir(Sink) if not name.startswith("_"))


def _probes(tree: ast.AST) -> list[tuple[int, str]]:
    """`getattr(x, "name")` / `hasattr(x, "name")` calls whose name is one of the sink's."""
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in {"getattr", "hasattr"} and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
                and node.args[1].value in SINK_NAMES):
            found.append((node.lineno, f"{node.func.id}(..., {node.args[1].value!r})"))
    return found


def test_no_module_calls_a_sink_method_through_getattr() -> None:
    wrong = [f"{path.relative_to(ROOT)}:{line}: {call}"
             for path in MODULES.values()
             for line, call in _probes(ast.parse(path.read_text(encoding="utf-8")))]
    assert not wrong, ("a sink method looked up by name instead of called through "
                       "consumers.sinks.Sink:\n" + "\n".join(wrong))


def test_the_probe_check_finds_a_getattr_on_a_sink_hook() -> None:
    tree = ast.parse('hook = getattr(self.sink, "at_end", None)\nok = getattr(x, "shape", 1)')
    assert _probes(tree) == [(1, "getattr(..., 'at_end')")]


def test_every_exception_class_derives_from_the_one_root() -> None:
    outside = []
    for name in MODULES:
        module = importlib.import_module(name)
        for attr, value in vars(module).items():
            if (isinstance(value, type) and issubclass(value, BaseException)
                    and value.__module__ == name and not issubclass(value, RlmeshStreamError)):
                outside.append(f"{name}.{attr} ({', '.join(b.__name__ for b in value.__bases__)})")
    assert not outside, ("exception classes not under rlmesh_stream.schemas.errors."
                         "RlmeshStreamError:\n" + "\n".join(sorted(outside)))


# docs/x.md, "Heading" (or several quoted headings), docs/x.md "Heading", docs/x.md#anchor
_CITATION = re.compile(r'docs/([\w.-]+\.md)(?:#([\w-]+)|[,:]?\s*\(?((?:"[^"]+"(?:,\s*)?)+))')
_HEADING = re.compile(r"^#+\s+(.+?)\s*$", re.M)


def _prose(path: Path) -> str:
    """A module's comments and string literals (docstrings), one passage per literal and
    per run of comment lines, `#`, quotes and line breaks gone, so a citation split over
    lines reads as one."""
    passages: list[list[str]] = [[]]
    source = io.StringIO(path.read_text(encoding="utf-8")).readline
    for token in tokenize.generate_tokens(source):
        if token.type == tokenize.COMMENT:
            passages[-1].append(token.string.lstrip("#"))
        elif token.type in (tokenize.NL, tokenize.NEWLINE) and passages[-1]:
            continue
        else:
            passages.append([])
            if token.type == tokenize.STRING:
                passages[-1].append(_QUOTES.sub("", token.string))
                passages.append([])
    return " | ".join(re.sub(r"\s+", " ", " ".join(p)) for p in passages if p)


_QUOTES = re.compile(r"""^[a-zA-Z]*(\"\"\"|'''|"|')|(\"\"\"|'''|"|')$""")


def _slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def _dangling(text: str, docs: Path) -> list[str]:
    wrong = []
    for match in _CITATION.finditer(text):
        page = docs / match.group(1)
        if not page.is_file():
            wrong.append(f"docs/{match.group(1)} (no such page)")
            continue
        headings = [h.strip("`* ") for h in _HEADING.findall(page.read_text(encoding="utf-8"))]
        if match.group(2) is not None:
            if match.group(2) not in {_slug(h) for h in headings}:
                wrong.append(f"docs/{match.group(1)}#{match.group(2)}")
            continue
        for cited in re.findall(r'"([^"]+)"', match.group(3)):
            # a heading "Decoding: which reader runs, and why" is cited as "Decoding"
            if not any(h.lower() == cited.lower() or h.lower().startswith(cited.lower() + ":")
                       for h in headings):
                wrong.append(f'docs/{match.group(1)}, "{cited}"')
    return wrong


def _sources() -> list[Path]:
    return [*MODULES.values(), *sorted((ROOT / "tests").rglob("*.py")),
            *sorted((ROOT / "benchmarks").rglob("*.py"))]


def test_no_comment_cites_a_section_docs_does_not_have() -> None:
    wrong = [f"{path.relative_to(ROOT)}: {citation}"
             for path in _sources() if path.name != "test_contracts.py"
             for citation in _dangling(_prose(path), ROOT / "docs")]
    assert not wrong, "citations of sections docs/ does not have:\n" + "\n".join(wrong)


def test_the_citation_check_finds_a_section_that_went(tmp_path: Path) -> None:
    (tmp_path / "page.md").write_text("# Page\n\n## Start-up: why\n\ntext\n",
                                      encoding="utf-8")
    text = ('(docs/page.md, "Start-up") (docs/page.md, "Round four") docs/page.md#start-up-why '
            "docs/page.md#round-six docs/gone.md#x")
    assert _dangling(text, tmp_path) == ['docs/page.md, "Round four"', "docs/page.md#round-six",
                                         "docs/gone.md (no such page)"]

"""The import graph of the installed package: data flows one way, and nothing goes round.

Read from the sources with `ast` (every import: top level, inside functions and under
`TYPE_CHECKING`), so the rules hold for what a reader of the code sees, not only for what
runs. The rules are the README's map of the code:
- `schemas` imports nothing else of ours: it is the contract both sides import;
- `producer` and `consumers` import only `schemas` (and themselves): no consumer imports
  the producer, and neither reaches into `infra`;
- no module imports, directly or through others, a module that imports it back.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "rlmesh_stream"
FOLDERS = ("schemas", "producer", "consumers", "infra")
ALLOWED = {
    "schemas": {"schemas"},
    "producer": {"producer", "schemas"},
    "consumers": {"consumers", "schemas"},
    "infra": set(FOLDERS),
}
# Hand-written modules longer than this say why in their docstring (a line with "Size:").
MAX_LINES = 500


def _modules() -> dict[str, Path]:
    found = {}
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if "_pb" in path.parts or "__pycache__" in path.parts:
                continue
            rel = path.relative_to(ROOT).with_suffix("")
            parts = list(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
            found[".".join([PACKAGE, *parts])] = path
    return found


MODULES = _modules()


def _imports(name: str, path: Path) -> Iterator[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        graph[name] = {target for target in _imports(name, path)
                       if target in MODULES and target != name}
    return graph


GRAPH = _graph()


def _folder(module: str) -> str:
    return module.split(".")[1]


@pytest.mark.parametrize("folder", FOLDERS)
def test_each_folder_imports_only_what_the_map_allows(folder: str) -> None:
    wrong = sorted(f"{source} -> {target}" for source, targets in GRAPH.items()
                   if _folder(source) == folder for target in targets
                   if _folder(target) not in ALLOWED[folder])
    assert not wrong, "imports against the direction of the data flow:\n" + "\n".join(wrong)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components with more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _without_packages(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """A package's `__init__` re-exporting its own modules is not a circle: drop those edges."""
    return {source: {t for t in targets if not (t.startswith(source + ".")
                                                or (source.startswith(t + ".")
                                                and MODULES[t].name == "__init__.py"))}
            for source, targets in graph.items()}


def test_no_module_imports_itself_round_a_circle() -> None:
    cycles = _cycles(_without_packages(GRAPH))
    assert not cycles, "import circles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_long_modules_say_why_they_are_long() -> None:
    long = []
    for path in MODULES.values():
        lines = path.read_text(encoding="utf-8").count("\n")
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
        if lines > MAX_LINES and "Size:" not in doc:
            long.append(f"{path.relative_to(ROOT)}: {lines} lines")
    assert not long, f"modules over {MAX_LINES} lines without a 'Size:' line:\n" + "\n".join(long)

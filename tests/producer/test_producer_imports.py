"""The import graph of `producer/` has no circle, type-only imports included (issue 24).

A circle, even under `TYPE_CHECKING`, means two modules cannot be read (or
moved) apart; the graph is read from the source, every import statement of a
module counted wherever it stands.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = "rlmesh_stream.producer"
SOURCE = Path(__file__).parents[2] / "producer"


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The modules of `producer/` that the module at `path` imports."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            # `from package import module` imports that module; `from module import name`, it.
            names = [f"{node.module}.{alias.name}" for alias in node.names] + [node.module]
        else:
            continue
        for name in names:
            if name.startswith(PACKAGE + "."):
                module = name[len(PACKAGE) + 1:].split(".")[0]
                if module in modules:
                    out.add(module)
    return out


def _graph() -> dict[str, set[str]]:
    files = {p.stem: p for p in SOURCE.glob("*.py")}
    modules = set(files) - {"__init__"}
    return {name: _imports(path, modules) - {name} for name, path in files.items()}


def _a_circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One circle of the graph, as the modules along it, or None."""
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> list[str] | None:
        if node in path:
            return [*path[path.index(node):], node]
        if node in done:
            return None
        for nxt in sorted(graph.get(node, ())):
            found = visit(nxt, [*path, node])
            if found:
                return found
        done.add(node)
        return None

    for start in sorted(graph):
        found = visit(start, [])
        if found:
            return found
    return None


def test_the_producers_modules_import_each_other_without_a_circle():
    graph = _graph()

    assert graph["drainer"] and graph["hooks"]  # the graph was read
    assert _a_circle(graph) is None, " -> ".join(_a_circle(graph) or [])

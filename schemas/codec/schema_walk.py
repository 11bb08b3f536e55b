"""The one walk over an Avro schema that every codec of ours is derived from.

A `load_schema` result (or a writer schema parsed by fastavro) defines each named type
once and names it after; a walker meets the definition first, in schema order, and then
the name. `SchemaWalk` keeps those definitions and resolves the names: the generated
reader (`avro_fastread._Gen`), the projection's plan (`avro_fastread.plan_projection`),
the generated writer (`avro_writer._Gen`), the reader's
dict -> dataclass converter (`avro_reader._Builder`), the interpreters of the subtrees
(`avro_subtrees`) and the check of foreign payloads (`avro_guard`) all walk through it.
"""

from __future__ import annotations

from typing import Any

from rlmesh_stream.schemas.contract.avro import named_types


def full_name(t: dict[str, Any]) -> str:
    """A named type's full name (`namespace.name`; fastavro's parsed form has it whole)."""
    ns = t.get("namespace")
    return f"{ns}.{t['name']}" if ns and "." not in t["name"] else str(t["name"])


def kind(t: Any) -> str:
    """The Avro type of a resolved node: a primitive's name, or a complex type's `type`;
    "union" for a list."""
    if isinstance(t, list):
        return "union"
    return t if isinstance(t, str) else str(t["type"])


def optional_branch(t: list[Any]) -> Any:
    """T of the only unions our schemas have, ["null", T]."""
    assert t[0] == "null" and len(t) == 2, f"unsupported union {t}"
    return t[1]


class SchemaWalk:
    """Named types met so far, by full name; `define` a node as it is met."""

    def __init__(self, root: Any = None) -> None:
        self.named: dict[str, Any] = {}
        if root is not None:
            self.define_all(root)

    def define(self, t: Any) -> Any:
        """Keep `t` if it defines a named type; return what `t` is (a name resolved)."""
        if isinstance(t, str):
            return self.named.get(t, t)
        if isinstance(t, dict) and t["type"] in ("record", "enum", "fixed"):
            self.named[full_name(t)] = t
        return t

    def define_all(self, t: Any) -> Any:
        """`define` every named type inside `t` too; return what `t` is."""
        if isinstance(t, (dict, list)):
            named_types(t, self.named)
        return self.define(t)


class Generator(SchemaWalk):
    """A walk that generates Python source: one function per record, fresh local names,
    the names the source refers to (`ns`, where it is executed)."""

    def __init__(self, ns: dict[str, Any]) -> None:
        super().__init__()
        self.ns = ns
        self.funcs: dict[str, str] = {}  # full name -> generated function name
        self.sources: list[str] = []
        self.n = 0

    def var(self, stem: str) -> str:
        """A fresh local name."""
        self.n += 1
        return f"{stem}{self.n}"

    def function_of(self, t: dict[str, Any], stem: str) -> tuple[str, str, bool]:
        """The full name of record `t`, its function's name (`{stem}_{name}`), and whether
        that function is new (the caller generates it now; recursion finds it taken)."""
        full = full_name(t)
        if full in self.funcs:
            return full, self.funcs[full], False
        fname = self.funcs[full] = f"{stem}_{t['name']}"
        return full, fname, True

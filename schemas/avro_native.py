"""Packed projections of framed values, read by the C extension `_avro_project`.

Why: a consumer's reading thread spends most of its time turning each record's Avro
bytes into a packed builder's row; the generated Python reader
(`avro_fastread.compile_projection`) takes ~2.8 us a record, the same plan run in C a
fraction of that. This module turns an event type's schema and a projection's items
into that plan, walking the schema as the Python generator does (the same fields read,
dropped, flattened or read whole), and hands every type the C side does not read itself
(records read whole, arrays, MetaMaps, SpaceSpecs) to the generated Python reader of
that field. It refuses what the Python reader refuses (tests/schemas/test_avro_native.py).

The extension is optional: where it was not built (no C compiler at install),
`available()` is False and consumers use the generated Python reader.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

from rlmesh_stream.schemas import bindings as bd
from rlmesh_stream.schemas.avro import load_schema
from rlmesh_stream.schemas.avro_fastread import (
    Call,
    Const,
    Framing,
    Item,
    Malformed,
    _Gen,
    _path_of,
    read_long,
)
from rlmesh_stream.schemas.topics import EventType

try:
    from rlmesh_stream.schemas import _avro_project
except ImportError:  # built without a C compiler: the Python reader serves
    _avro_project = None  # type: ignore[assignment]

# step codes and item kinds, as _avro_project.c numbers them
LONG, STRING, BYTES, DOUBLE, BOOL, ENUM, PY, META = range(8)
SLOT, CONST, ARG, CALL = range(4)
_PRIMITIVES = {"long": LONG, "string": STRING, "bytes": BYTES, "double": DOUBLE,
               "boolean": BOOL}


def available() -> bool:
    """Whether the C extension was built (with the package, by a C compiler)."""
    return _avro_project is not None


class _Plan:
    """The steps, derived values and slots of one projection, in schema order."""

    def __init__(self) -> None:
        self.gen = _Gen()  # the generated Python readers of what C hands back
        self.steps: list[tuple[int, int, bool, Any, Any]] = []
        self.derived: list[tuple[int, int, Any]] = []
        self.out: dict[str, int] = {}  # field path -> slot
        self.slots = 0
        self._readers: list[tuple[int, str]] = []  # (step, generated function name)

    def slot(self, path: str) -> int:
        self.slots += 1
        self.out[path] = self.slots - 1
        return self.slots - 1

    def fields(self, t: dict[str, Any], prefix: str, wanted: set[str],
               memo: dict[str, Callable[[Any], Any]] | None = None) -> None:
        """As `_Projector.fields_into`: a record's fields, flattened where only some of a
        record's own fields are wanted."""
        for f in t["fields"]:
            path = f"{prefix}{f['name']}"
            ft = self.gen.define(f["type"])
            inner = {w for w in wanted if w.startswith(path + ".")}
            if memo and path in memo and not inner and self.meta(ft, memo[path], path):
                continue
            if path in wanted or not inner:
                self.step(ft, path if path in wanted else None)
            if not inner:
                continue
            if isinstance(ft, dict) and ft["type"] == "record" and path not in wanted:
                self.gen._define_all(ft)
                self.fields(ft, path + ".", inner)
            else:  # a record inside a union, or also wanted whole: its attributes
                if path not in wanted:
                    self.step(ft, path)
                for w in sorted(inner):
                    getter = operator.attrgetter(w[len(path) + 1:])
                    self.derived.append((self.slot(w), self.out[path], getter))

    def step(self, t: Any, path: str | None) -> None:
        """One field's step: read into the path's slot, or read, checked and dropped."""
        nullable = isinstance(t, list)
        if nullable:
            assert t[0] == "null" and len(t) == 2
            t = self.gen.define(t[1])
        kind = t if isinstance(t, str) else t["type"]
        slot = -1 if path is None else self.slot(path)
        if kind in _PRIMITIVES:
            self.steps.append((_PRIMITIVES[kind], slot, nullable, None, None))
        elif kind == "enum":
            cls = bd.ENUM_CLASSES[f"{t['namespace']}.{t['name']}"]
            self.steps.append((ENUM, slot, nullable, tuple(cls[s] for s in t["symbols"]),
                               None))
        else:  # the generated Python reader of the field's value
            self._readers.append((len(self.steps), self.python_reader(t)))
            self.steps.append((PY, slot, nullable, None, None))

    def python_reader(self, t: Any) -> str:
        """The name of a generated `(b, p) -> (value, p)` reader of a `t` value."""
        name = self.gen.var("_field")
        body = ["L = len(b)"]
        self.gen.value(t, "v", body)
        self.gen.sources.append(f"def {name}(b, p):\n" + "\n".join(
            f"    {line}" for line in [*body, "return v, p"]))
        return name

    def meta(self, t: Any, fn: Callable[[Any], Any], path: str) -> bool:
        """A (nullable) MetaMap field converted by `fn`, memoised on its bytes in C (as
        `_Projector.meta_map`); False for any other type."""
        nullable = isinstance(t, list)
        node = self.gen.define(t[1]) if nullable else t
        if not (isinstance(node, dict) and node.get("type") == "record"
                and f"{node['namespace']}.{node['name']}" == bd.META_MAP):
            return False
        reader = self.gen.ns[self.gen.record_func(node)]  # not generated: no exec needed
        self.steps.append((META, self.slot(path), nullable, reader, fn))
        return True

    def resolve(self) -> list[tuple[int, int, bool, Any, Any]]:
        """The steps, with the generated Python readers compiled in."""
        source = "\n\n".join(self.gen.sources)
        exec(compile(source, "<avro native projection fields>", "exec"), self.gen.ns)
        steps = list(self.steps)
        for at, name in self._readers:
            code, slot, nullable, _, _ = steps[at]
            steps[at] = (code, slot, nullable, self.gen.ns[name], None)
        return steps


def compile_native_projection(event_type: EventType, items: list[Item],
                              framed: Framing) -> Callable[[Any, Any], tuple[Any, ...]]:
    """The C reader of `items` of framed values of `event_type`: (value, arg) -> values,
    refused and checked for trailing bytes as `compile_projection(framed=...)` does."""
    if _avro_project is None:
        raise RuntimeError("the C extension rlmesh_stream.schemas._avro_project is not built")
    plan = _Plan()
    wanted = {p for p in map(_path_of, items) if p is not None}
    calls = [i for i in items if isinstance(i, Call)]
    memo = {i.path: i.fn for i in calls if i.path not in items
            and sum(c.path == i.path for c in calls) == 1}
    plan.fields(load_schema(event_type), "", wanted, memo)
    missing = wanted - plan.out.keys()
    if missing:
        raise KeyError(f"{event_type.value} has no field {sorted(missing)[0]!r}")
    spec: list[tuple[int, int, Any]] = []
    for item in items:
        if isinstance(item, str):
            spec.append((SLOT, plan.out[item], None))
        elif isinstance(item, Const):
            spec.append((CONST, 0, item.value))
        elif isinstance(item, Call) and item.path in memo:
            spec.append((SLOT, plan.out[item.path], None))  # converted by the META step
        elif isinstance(item, Call):
            spec.append((CALL, plan.out[item.path], item.fn))
        else:
            spec.append((ARG, 0, None))
    return _avro_project.Projector(  # type: ignore[no-any-return]
        plan.resolve(), plan.derived, spec, plan.slots, framed.start, framed.refused,
        framed.trailing, Malformed, read_long)

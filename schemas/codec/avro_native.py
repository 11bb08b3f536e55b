"""Packed projections of framed values, read by the C extension `_avro_project`.

Why: a consumer's reading thread spends most of its time turning each record's Avro
bytes into a packed builder's row; the generated Python reader
(`avro_fastread.compile_projection`) takes ~2.8 us a record, the same plan run in C a
fraction of that. This module turns a projection's plan (`avro_fastread.plan_projection`,
the one walk of the schema both readers are made from: the fields read, dropped,
flattened or read whole) into the steps C runs, and hands every type the C side does not
read itself (records read whole, arrays, MetaMaps, SpaceSpecs) to the generated Python
reader of that field. It refuses what the Python reader refuses
(tests/schemas/test_schema_native_projection.py).

The extension is optional: where it was not built (no C compiler at install),
`available()` is False and consumers use the generated Python reader.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

from rlmesh_stream.schemas.codec.avro_fastread import (
    Call,
    Const,
    Framing,
    Item,
    Malformed,
    Step,
    _Gen,
    plan_projection,
    read_long,
)
from rlmesh_stream.schemas.codec.schema_walk import full_name, kind, optional_branch
from rlmesh_stream.schemas.contract import bindings as bd
from rlmesh_stream.schemas.contract.topics import EventType

try:
    from rlmesh_stream.schemas.codec import _avro_project
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


def compile_native_projection(event_type: EventType, items: list[Item],
                              framed: Framing) -> Callable[[Any, Any], tuple[Any, ...]]:
    """The C reader of `items` of framed values of `event_type`: (value, arg) -> values,
    refused and checked for trailing bytes as `compile_projection(framed=...)` does."""
    if _avro_project is None:
        raise RuntimeError("the C extension rlmesh_stream.schemas.codec._avro_project is not built")
    gen = _Gen()  # the generated Python readers of the fields C hands back
    plan = plan_projection(gen, event_type, items)
    slots: dict[str, int] = {}
    steps = [_step(gen, step, slots) for step in plan.steps]
    derived = []
    for path, whole, attrs in plan.derived:
        derived.append((len(slots), slots[whole], operator.attrgetter(attrs)))
        slots[path] = len(slots)
    spec: list[tuple[int, int, Any]] = []
    for item in items:
        if isinstance(item, str):
            spec.append((SLOT, slots[item], None))
        elif isinstance(item, Const):
            spec.append((CONST, 0, item.value))
        elif isinstance(item, Call) and item.path in plan.memo:
            spec.append((SLOT, slots[item.path], None))  # converted by the META step
        elif isinstance(item, Call):
            spec.append((CALL, slots[item.path], item.fn))
        else:
            spec.append((ARG, 0, None))
    exec(compile("\n\n".join(gen.sources), "<avro native projection fields>", "exec"), gen.ns)
    steps = [(code, slot, nullable, gen.ns[obj] if code == PY else obj, obj2)
             for code, slot, nullable, obj, obj2 in steps]
    return _avro_project.Projector(  # type: ignore[no-any-return]
        steps, derived, spec, len(slots), framed.start, framed.refused, framed.trailing,
        Malformed, read_long)


def _step(gen: _Gen, step: Step, slots: dict[str, int]) -> tuple[int, int, bool, Any, Any]:
    """A plan step as C reads it: (code, slot or -1, nullable, what, conversion); a PY
    step names its generated reader, looked up once the readers are compiled."""
    t, nullable = step.type, isinstance(step.type, list)
    if nullable:
        t = gen.define(optional_branch(t))
    slot = -1
    if step.path is not None:
        slot = slots[step.path] = len(slots)
    what = kind(t)
    if step.convert is not None:  # a MetaMap: the decoder is set, not generated
        return META, slot, nullable, gen.ns[gen.record_func(t)], step.convert
    if what in _PRIMITIVES:
        return _PRIMITIVES[what], slot, nullable, None, None
    if what == "enum":
        cls = bd.ENUM_CLASSES[full_name(t)]
        return ENUM, slot, nullable, tuple(cls[s] for s in t["symbols"]), None
    name = gen.var("_field")  # the generated Python reader of the field's value
    body = ["L = len(b)"]
    gen.value(t, "v", body)
    gen.sources.append(f"def {name}(b, p):\n" + "\n".join(
        f"    {line}" for line in [*body, "return v, p"]))
    return PY, slot, nullable, name, None

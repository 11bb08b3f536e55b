"""Generated Avro decoders for payloads written with exactly our schema (the common case).

Why: consumers decode every record; fastavro's generic reader builds a dict
per record that then has to be turned into dataclasses. When the writer
schema is our reader schema (same parsing canonical form) no resolution is
needed, so a decoder generated from the `.avsc` reads the bytes straight into
the dataclasses. Any other writer schema goes through fastavro's resolution
(`rlmesh_stream.schemas.codec.avro_reader`). Everything is bounds-checked: a truncated or
malformed payload raises, and the caller turns that into CorruptPayloadError.

Why keep hand-written decoding next to fastavro: measured side by side
(`benchmarks/bench_contract.py`), it is 2.3x to 3.2x faster than fastavro's compiled
reader plus the conversion to dataclasses it replaces (one 8-lane `StepCompletedEvent`:
19.7 against 62.5 us), and Avro decoding is a large share of a consumer's time (read +
decode ~3 us of an event's ~10).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn

from rlmesh_stream.schemas.codec.avro_subtrees import SpaceSpecReader, meta_reader
from rlmesh_stream.schemas.codec.projection_items import Call, Const, Item
from rlmesh_stream.schemas.codec.schema_walk import Generator, full_name, kind, optional_branch
from rlmesh_stream.schemas.codec.zigzag import ZD, Malformed, read_long
from rlmesh_stream.schemas.contract import bindings as bd
from rlmesh_stream.schemas.contract.avro import load_schema
from rlmesh_stream.schemas.contract.topics import EventType

__all__ = ["Malformed", "compile_projection", "compile_reader", "plan_projection", "read_long"]


def _bad(what: str) -> None:
    raise Malformed(what)


_DOUBLES: dict[int, Callable[..., tuple[float, ...]]] = {}


def doubles(n: int) -> Callable[..., tuple[float, ...]]:
    unpack = _DOUBLES.get(n)
    if unpack is None:
        unpack = _DOUBLES[n] = struct.Struct(f"<{n}d").unpack_from
    return unpack


_D = struct.Struct("<d").unpack_from


# ---------------------------------------------------------------- code generation

class _Gen(Generator):
    def __init__(self) -> None:
        super().__init__({"ZD": ZD, "read_long": read_long, "_bad": _bad,
                          "doubles": doubles, "_DP": _DOUBLES, "_D": _D})

    def record_func(self, t: dict[str, Any]) -> str:
        full, fname, new = self.function_of(t, "dec")
        if not new:
            return fname
        if full in (bd.META_MAP, bd.SPACE_SPEC):  # interpreted subtrees (avro_subtrees)
            self.define_all(t)
            self.ns[fname] = (meta_reader if full == bd.META_MAP else SpaceSpecReader)(t)
            return fname
        cls = bd.RECORD_CLASSES[full]
        self.ns[f"_cls_{t['name']}"] = cls
        body: list[str] = ["L = len(b)"]
        names = []
        for f in t["fields"]:
            v = self.var("v")
            self.value(f["type"], v, body)
            names.append((f["name"], v))
        args = ", ".join(f"{n}={v}" for n, v in names)
        body.append(f"return _cls_{t['name']}({args}), p")
        self.sources.append(f"def {fname}(b, p):\n" + "\n".join(f"    {x}" for x in body))
        return fname

    def long(self, v: str, body: list[str]) -> None:
        """A zigzag varint: one- and two-byte values inline (counts, indexes, steps and
        durations below 8192), longer ones through read_long."""
        x, y = self.var("x"), self.var("y")
        body += [f"{x} = b[p]", f"if {x} < 128:", f"    {v} = ZD[{x}]", "    p += 1",
                 "else:", f"    {y} = b[p + 1]", f"    if {y} < 128:",
                 f"        {y} = ({x} & 127) | ({y} << 7)",
                 f"        {v} = ({y} >> 1) ^ -({y} & 1)", "        p += 2",
                 "    else:", f"        {v}, p = read_long(b, p)"]

    def value(self, t: Any, v: str, body: list[str]) -> None:
        t = self.define(t)
        if isinstance(t, list):
            branch = optional_branch(t)
            i = self.var("i")
            body += [f"{i} = b[p]", "p += 1", f"if {i} == 0:", f"    {v} = None",
                     f"elif {i} == 2:"]
            inner: list[str] = []
            self.value(branch, v, inner)
            body += [f"    {line}" for line in inner]
            body += ["else:", "    _bad('union branch')"]
            return
        what = kind(t)
        if what == "long":
            self.long(v, body)
        elif what in ("string", "bytes"):
            n = self.var("n")
            self.long(n, body)
            body += [f"if {n} < 0 or p + {n} > L: _bad('truncated')"]
            if what == "string":  # no event string holds NUL (the contract)
                body += [f"{v} = b[p:p + {n}]", f"if 0 in {v}: _bad('NUL in a string')",
                         f"{v} = {v}.decode()", f"p += {n}"]
            else:
                body += [f"{v} = b[p:p + {n}]", f"p += {n}"]
        elif what == "double":
            body += [f"{v} = _D(b, p)[0]", "p += 8"]
        elif what == "boolean":
            body += [f"{v} = b[p]", f"if {v} > 1: _bad('boolean')", f"{v} = {v} == 1", "p += 1"]
        elif what == "enum":
            table = self.var("_E")
            cls = bd.ENUM_CLASSES[full_name(t)]
            self.ns[table] = {i: cls[s] for i, s in enumerate(t["symbols"])}
            idx = self.var("e")
            self.long(idx, body)
            body += [f"{v} = {table}[{idx}]"]
        elif what == "record":
            fn = self.record_func(t)
            body += [f"{v}, p = {fn}(b, p)"]
        elif what == "array":
            self.array(self.define(t["items"]), v, body)
        else:
            raise NotImplementedError(what)

    def array(self, items: Any, v: str, body: list[str]) -> None:
        n = self.var("n")
        body += [f"{v} = []", "while True:"]
        inner: list[str] = []
        self.long(n, inner)
        inner += [f"if {n} == 0:", "    break", f"if {n} < 0:", f"    {n} = -{n}",
                  "    _, p = read_long(b, p)"]
        if items == "double":
            inner += [f"if p + 8 * {n} > L: _bad('truncated doubles')",
                      f"{v} += (_DP.get({n}) or doubles({n}))(b, p)", f"p += 8 * {n}"]
        elif items == "boolean":
            c = self.var("c")
            inner += [f"{c} = b[p:p + {n}]",
                      f"if len({c}) != {n} or {c}.translate(None, b'\\x00\\x01'): _bad('flags')",
                      f"{v} += map(bool, {c})", f"p += {n}"]
        else:
            item = self.var("it")
            loop: list[str] = []
            self.value(items, item, loop)
            inner += [f"for _ in range({n}):"] + [f"    {x}" for x in loop]
            inner += [f"    {v}.append({item})"]
        body += [f"    {x}" for x in inner]


def _path_of(item: Item) -> str | None:
    return item if isinstance(item, str) else item.path if isinstance(item, Call) else None


@dataclass(frozen=True)
class Step:
    """One field of a projection's plan, in schema order: what is read, and where to."""

    type: Any  # the field's Avro type, named types resolved (a nullable union as is)
    path: str | None  # the value's dotted path, or None: read, checked and dropped
    convert: Callable[[Any], Any] | None = None  # a (nullable) MetaMap read converted
    strings: int = 0  # > 1: the first of a flattened record's leading string fields


@dataclass
class Plan:
    """What a projection reads, derived from the schema once (the generated reader
    below runs it)."""

    steps: list[Step] = field(default_factory=list)
    # (path, the path of a record read whole, its attribute path): values read from a
    # record in a union, or one also wanted whole
    derived: list[tuple[str, str, str]] = field(default_factory=list)
    # path -> conversion of the MetaMap fields read converted (memoised on their bytes);
    # while planning, every conversion of a field no plain item wants
    memo: dict[str, Callable[[Any], Any]] = field(default_factory=dict)


def plan_projection(gen: _Gen, event_type: EventType, items: list[Item]) -> Plan:
    """The plan of `items` of `event_type` (paths name fields of the reader schema).

    Every field is still read and checked exactly as the full decoder reads it (so a
    payload one of them refuses, the other refuses too); fields no item names are
    dropped, and records named only through their fields (`route.lane`) are flattened:
    no dataclass is built for them. KeyError: an item names no field."""
    plan = Plan()
    calls = [i for i in items if isinstance(i, Call)]
    plan.memo = {i.path: i.fn for i in calls if i.path not in items
                 and sum(c.path == i.path for c in calls) == 1}
    wanted = {p for p in map(_path_of, items) if p is not None}
    _plan_fields(gen, plan, load_schema(event_type), "", wanted)
    # only what a step reads converted: any other conversion is applied to the value read
    plan.memo = {s.path: s.convert for s in plan.steps
                 if s.convert is not None and s.path is not None}
    read = {s.path for s in plan.steps} | {d[0] for d in plan.derived}
    missing = wanted - read
    if missing:
        raise KeyError(f"{event_type.value} has no field {sorted(missing)[0]!r}")
    return plan


def _plan_fields(gen: _Gen, plan: Plan, t: dict[str, Any], prefix: str,
                 wanted: set[str]) -> None:
    fields = t["fields"]
    run = 0  # a flattened record's leading strings (a route's ids: see string_run)
    while prefix and run < len(fields) and fields[run]["type"] == "string":
        run += 1
    for i, f in enumerate(fields):
        path = f"{prefix}{f['name']}"
        ft = gen.define(f["type"])
        inner = {w for w in wanted if w.startswith(path + ".")}
        memo = plan.memo.get(path) if not prefix else None
        if memo is not None and not inner and _is_memoised(gen, ft):
            plan.steps.append(Step(ft, path, convert=memo))
            continue
        if path in wanted or not inner:
            plan.steps.append(Step(ft, path if path in wanted else None,
                                   strings=run if i == 0 and run > 1 else 0))
        if not inner:
            continue
        if isinstance(ft, dict) and ft["type"] == "record" and path not in wanted:
            gen.define_all(ft)
            _plan_fields(gen, plan, ft, path + ".", inner)
        else:  # a record inside a union, or also wanted whole: its attributes
            if path not in wanted:
                plan.steps.append(Step(ft, path))
            plan.derived += [(w, path, w[len(path) + 1:]) for w in sorted(inner)]


def _is_memoised(gen: _Gen, t: Any) -> bool:
    """A MetaMap or a SpaceSpec, or a nullable one: interpreted subtrees whose conversion
    is memoised on their bytes (a session repeats its spaces in every step's events)."""
    node = gen.define(optional_branch(t)) if isinstance(t, list) else t
    return (isinstance(node, dict) and node.get("type") == "record"
            and full_name(node) in (bd.META_MAP, bd.SPACE_SPEC))


class _Projector(_Gen):
    """Generates the Python reader of a projection's plan."""

    MEMO_SIZE = 4  # the last distinct values a memoised conversion keeps

    def steps(self, plan: Plan, body: list[str]) -> dict[str, str]:
        """The lines reading the plan's steps; returns path -> expression."""
        out: dict[str, str] = {}
        steps = plan.steps
        i = 0
        while i < len(steps):
            step = steps[i]
            if step.strings > 1:
                self.string_run(steps[i:i + step.strings], body, out)
                i += step.strings
                continue
            v = self.var("v")
            if step.convert is not None:
                self.memoised(step.type, step.convert, body)
                body.append(f"{v} = c")  # memoised left the converted value in `c`
            else:
                self.value(step.type, v, body)
            if step.path is not None:
                out[step.path] = v
            i += 1
        for path, whole, attrs in plan.derived:
            out[path] = f"(None if {out[whole]} is None else {out[whole]}.{attrs})"
        return out

    def string_run(self, steps: list[Step], body: list[str], out: dict[str, str]) -> None:
        """Read a flattened record's leading string fields (two or more) through a memo of
        their bytes. A route's ids (`env_id`, `env_component_id`, `model_component_id`)
        are shared by most records of a fleet while the session before them is not;
        Avro's encoding is prefix-free, so bytes that start with the complete encoding of
        strings already read hold those strings (a `startswith` instead of a varint, a
        slice and a UTF-8 decode each)."""
        names = [self.var("v") for _ in steps]
        for step, v in zip(steps, names, strict=True):
            if step.path is not None:
                out[step.path] = v
        k = self.n = self.n + 1
        self.ns[f"_R{k}"] = []
        values = ", ".join(names) + ","
        reads: list[str] = []
        for v in names:
            self.value("string", v, reads)
        body += self.bytes_memo(f"_R{k}", hit=[f"{values} = c"], miss=reads,
                                value=f"({values})")

    def bytes_memo(self, table: str, hit: list[str], miss: list[str], value: str) -> list[str]:
        """Lines that read a value through `table`, the last MEMO_SIZE (bytes, value) pairs:
        bytes at `p` that start with a pair's bytes hold its value (`c`), and `hit` runs;
        otherwise `miss` reads it from `s` (the start) and the pair is kept."""
        return ["s = p", f"for raw, c in {table}:", "    if b.startswith(raw, p):",
                "        p += len(raw)", *(f"        {line}" for line in hit), "        break",
                "else:", *(f"    {line}" for line in miss),
                f"    if len({table}) >= {self.MEMO_SIZE}:", f"        {table}.pop()",
                f"    {table}.insert(0, (b[s:p], {value}))"]

    def memoised(self, t: Any, fn: Callable[[Any], Any], body: list[str]) -> None:
        """`fn` of a (nullable) MetaMap or SpaceSpec field, memoised on its bytes (the
        episodes of a run mostly repeat a few final_info values, a session its spaces in
        every step's events). Avro's encoding is prefix-free: bytes that
        start with the complete encoding of a value already read hold that value, so a hit
        is a `startswith` of the last few values' bytes; a miss decodes it as the full
        decoder does. Leaves the result in `c`."""
        nullable = isinstance(t, list)
        dec = self.record_func(self.define(optional_branch(t)) if nullable else t)
        k = self.n = self.n + 1
        self.ns.update({f"_M{k}": [], f"_FN{k}": fn})
        memo = self.bytes_memo(f"_M{k}", hit=[], miss=[f"c, p = {dec}(b, s)",
                                                      f"c = _FN{k}(c)"], value="c")
        if not nullable:
            body += memo
            return
        optional_branch(t)
        body += ["i = b[p]", "p += 1", "if i == 0:", f"    c = _FN{k}(None)", "elif i == 2:"]
        body += [f"    {line}" for line in memo]
        body += ["else:", "    _bad('union branch')"]


@dataclass(frozen=True)
class Framing:
    """A projection of whole framed values: where the record starts (after the wire
    prefix) and what a refused value raises (the caller's errors, see avro_reader)."""

    start: int
    refused: Callable[[Exception], NoReturn]  # the decode failed: its exception
    trailing: Callable[[int], NoReturn]  # bytes were left after the record: how many


def compile_projection(event_type: EventType, items: list[Item], *,
                       framed: Framing | None = None) -> Callable[..., Any]:
    """A decoder of an event type that returns only `items`, in order, as one tuple:
    (bytes, start, arg) -> (values, end). Paths name fields of the reader schema.

    `framed`: (value, arg) -> values instead, the whole value one record from
    `framed.start` (one call per record where a wrapper costs two)."""
    gen = _Projector()
    plan = plan_projection(gen, event_type, items)
    body: list[str] = ["L = len(b)"]
    out = gen.steps(plan, body)
    exprs: list[str] = []
    for i, item in enumerate(items):
        if isinstance(item, str):
            exprs.append(out[item])
        elif isinstance(item, Const):
            gen.ns[f"_K{i}"] = item.value
            exprs.append(f"_K{i}")
        elif isinstance(item, Call) and item.path in plan.memo:
            exprs.append(out[item.path])  # converted by the memoised read
        elif isinstance(item, Call):
            gen.ns[f"_F{i}"] = item.fn
            exprs.append(f"_F{i}({out[item.path]})")
        else:
            exprs.append("arg")
    values = f"({', '.join(exprs)}{',' if len(exprs) == 1 else ''})"
    if framed is None:
        head = "def project(b, p, arg):\n"
        lines = [*body, f"return {values}, p"]
    else:
        gen.ns.update({"_REFUSED": framed.refused, "_TRAILING": framed.trailing})
        head = "def project(b, arg):\n"
        lines = ["if type(b) is not bytes:", "    b = bytes(b)", f"p = {framed.start}",
                 "try:", *(f"    {x}" for x in [*body, f"values = {values}"]),
                 "except Exception as exc:", "    _REFUSED(exc)",
                 "if p != L:", "    _TRAILING(L - p)", "return values"]
    source = "\n\n".join([*gen.sources, head + "\n".join(f"    {x}" for x in lines)])
    name = f"<avro projection {event_type.event_class.__name__}>"
    exec(compile(source, name, "exec"), gen.ns)
    return gen.ns["project"]  # type: ignore[no-any-return]


def compile_reader(event_type: EventType) -> tuple[Callable[[bytes, int], tuple[Any, int]], str]:
    """The generated decoder of an event type: (bytes, start) -> (event, end)."""
    gen = _Gen()
    root = gen.record_func(load_schema(event_type))
    source = "\n\n".join(gen.sources)
    exec(compile(source, f"<avro decoder {event_type.event_class.__name__}>", "exec"), gen.ns)
    return gen.ns[root], source

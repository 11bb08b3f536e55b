"""The two subtrees the generated codecs hand to interpreters, read and written: MetaMap
(free-form `info` values, recursive) and SpaceSpec (a protobuf message mirrored in Avro).

Why apart from the generated code: their shape is data (a MetaMap nests to any depth,
a SpaceSpec's oneofs are unions of records), so an interpreter walks them (through
`schema_walk.SchemaWalk`), memoised where values repeat; the generated readers and
writers (`avro_fastread`, `avro_writer`) call these for such a field.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable
from typing import Any, ClassVar

from google.protobuf.message import Message

from rlmesh_stream.schemas.codec.avro_protos import space_spec_from_avro
from rlmesh_stream.schemas.codec.schema_walk import SchemaWalk
from rlmesh_stream.schemas.codec.zigzag import ZZ, Malformed, long_bytes, read_long
from rlmesh_stream.schemas.contract import bindings as bd
from rlmesh_stream.schemas.contract.validate import MAX_META_DEPTH
from rlmesh_stream.schemas.errors import RlmeshStreamError

MEMO_LIMIT = 4096
_D = struct.Struct("<d").unpack_from
_DOUBLE = struct.Struct("<d").pack
_BOOL = {True: b"\x01", False: b"\x00"}


class NotEncodable(RlmeshStreamError):
    """Internal: the fast path saw a bad value; the validator will name it."""


# ---------------------------------------------------------------- reading

def read_blocks(b: bytes, p: int,
                read_item: Callable[[bytes, int], tuple[Any, int]]) -> tuple[list[Any], int]:
    """An Avro array or map body: blocks of items until a zero count.

    A negative count is followed by the block's byte size, which a reader may skip.
    """
    items: list[Any] = []
    while True:
        n, p = read_long(b, p)
        if n == 0:
            return items, p
        if n < 0:
            n = -n
            _, p = read_long(b, p)
        for _ in range(n):
            item, p = read_item(b, p)
            items.append(item)



class GenericReader(SchemaWalk):
    """Interpretive reader producing fastavro-style values (records in multi-branch
    unions as (full name, dict)); used for SpaceSpec, which is cached per bytes."""

    def read(self, t: Any, b: bytes, p: int) -> tuple[Any, int]:
        t = self.define(t)
        if isinstance(t, list):
            i, p = read_long(b, p)
            if not 0 <= i < len(t):
                raise Malformed(f"union branch {i} of {len(t)}")
            branch = t[i]
            value, p = self.read(branch, b, p)
            resolved = self.named.get(branch, branch) if isinstance(branch, str) else branch
            if isinstance(resolved, dict) and resolved["type"] == "record" and len(t) > 2:
                return (f"{resolved['namespace']}.{resolved['name']}", value), p
            return value, p
        kind = t if isinstance(t, str) else t["type"]
        if kind == "null":
            return None, p
        if kind == "boolean":
            if b[p] > 1:
                raise Malformed("boolean byte not 0/1")
            return b[p] == 1, p + 1
        if kind == "long":
            return read_long(b, p)
        if kind in ("string", "bytes"):
            n, p = read_long(b, p)
            if n < 0 or p + n > len(b):
                raise Malformed("truncated string/bytes")
            raw = b[p:p + n]
            if kind == "string" and 0 in raw:
                raise Malformed("NUL in a string")
            return (raw.decode() if kind == "string" else raw), p + n
        if kind == "double":
            return _D(b, p)[0], p + 8
        if kind == "enum":
            i, p = read_long(b, p)
            if not 0 <= i < len(t["symbols"]):
                raise Malformed(f"enum index {i}")
            return t["symbols"][i], p
        if kind == "record":
            out = {}
            for f in t["fields"]:
                out[f["name"]], p = self.read(f["type"], b, p)
            return out, p
        if kind == "array":
            item_type = t["items"]
            return read_blocks(b, p, lambda b, p: self.read(item_type, b, p))
        raise Malformed(f"unsupported Avro type {kind}")


SPEC_MEMO = 16  # distinct SpaceSpec encodings a reader remembers (most recent first)


class SpaceSpecReader:
    """A SpaceSpec, memoised by its encoding: every observation and action event carries
    its space, nearly always one of a stream's few. Avro's binary form is read left to
    right with no look-ahead, so bytes at `p` that start with a remembered encoding are
    exactly that value (it ends where that encoding ends); the walk and the conversion to
    protobuf were a fifth of an export's CPU. Each call returns a copy (callers own it)."""

    def __init__(self, node: dict[str, Any]) -> None:
        self._generic = GenericReader(node)
        self._node = node
        self._memo: list[tuple[bytes, Message]] = []

    def __call__(self, b: bytes, p: int) -> tuple[Any, int]:
        memo = self._memo
        for i, (raw, spec) in enumerate(memo):
            if b.startswith(raw, p):
                if i:
                    memo.insert(0, memo.pop(i))
                out = type(spec)()
                out.CopyFrom(spec)
                return out, p + len(raw)
        data, end = self._generic.read(self._node, b, p)
        spec = space_spec_from_avro(data)
        memo.insert(0, (bytes(b[p:end]), spec))
        del memo[SPEC_MEMO:]
        out = type(spec)()
        out.CopyFrom(spec)
        return out, end


# ---------------------------------------------------------------- MetaMap

def meta_reader(node: dict[str, Any]) -> Callable[[bytes, int], tuple[dict[str, Any], int]]:
    """The reader of a MetaMap. Refuses nesting deeper than the writer allows
    (MAX_META_DEPTH, counted as `meta_map_encoder` counts it): a record nesting thousands
    of lists would otherwise be read until the interpreter's recursion limit."""
    branches: list[Any] = node["fields"][0]["type"]["values"]
    names = [br if isinstance(br, str) else f"{br['namespace']}.{br['name']}" for br in branches]
    kinds = {"long": 0, "double": 1, "string": 2, "boolean": 3, "bytes": 4,
             bd.META_LIST: 5, bd.META_MAP: 6}
    table = [kinds[n] for n in names]

    def value(b: bytes, p: int, depth: int) -> tuple[Any, int]:
        i, p = read_long(b, p)
        k = table[i] if 0 <= i < len(table) else -1
        if k == 0:
            return read_long(b, p)
        if k == 1:
            return _D(b, p)[0], p + 8
        if k in (2, 4):
            n, p = read_long(b, p)
            if n < 0 or p + n > len(b):
                raise Malformed("truncated MetaMap text/bytes")
            raw = b[p:p + n]
            if k == 2 and 0 in raw:
                raise Malformed("NUL in a MetaMap string")
            return (raw.decode() if k == 2 else raw), p + n
        if k == 3:
            if b[p] > 1:
                raise Malformed("boolean byte not 0/1")
            return b[p] == 1, p + 1
        if k == 5:
            if depth > MAX_META_DEPTH:
                raise Malformed(f"MetaMap nested deeper than {MAX_META_DEPTH}")
            return read_blocks(b, p, values_at[depth + 1])
        if k == 6:
            return mapping(b, p, depth)
        raise Malformed(f"MetaValue branch {i}")

    def entry(b: bytes, p: int, depth: int) -> tuple[tuple[str, Any], int]:
        kn, p = read_long(b, p)
        if kn < 0 or p + kn > len(b):
            raise Malformed("truncated MetaMap key")
        key = b[p:p + kn]
        if 0 in key:
            raise Malformed("NUL in a MetaMap key")
        item, end = value(b, p + kn, depth + 1)
        return (key.decode(), item), end

    def mapping(b: bytes, p: int, depth: int) -> tuple[dict[str, Any], int]:
        if depth > MAX_META_DEPTH:
            raise Malformed(f"MetaMap nested deeper than {MAX_META_DEPTH}")
        entries, p = read_blocks(b, p, entries_at[depth])
        return dict(entries), p

    values_at = [functools.partial(value, depth=d) for d in range(MAX_META_DEPTH + 2)]
    entries_at = [functools.partial(entry, depth=d) for d in range(MAX_META_DEPTH + 1)]
    return functools.partial(mapping, depth=0)


# ---------------------------------------------------------------- writing

def meta_map_encoder(schema: dict[str, Any]) -> Callable[[dict[str, Any]], bytes]:
    """Encoder of a MetaMap dict; branch numbers come from the schema's value union."""
    branches: list[Any] = schema["fields"][0]["type"]["values"]
    names = [b if isinstance(b, str) else f"{b['namespace']}.{b['name']}" for b in branches]
    idx = {name: ZZ[i] for i, name in enumerate(names)}
    tag_long, tag_double, tag_str = idx["long"], idx["double"], idx["string"]
    tag_bool, tag_bytes = idx["boolean"], idx["bytes"]
    tag_list, tag_map = idx[bd.META_LIST], idx[bd.META_MAP]
    true_b, false_b = tag_bool + b"\x01", tag_bool + b"\x00"

    def value(v: Any, out: list[bytes], depth: int) -> None:
        t = type(v)
        if t is str:
            if "\x00" in v:
                raise NotEncodable
            b = v.encode()
            out += (tag_str, long_bytes(len(b)), b)
        elif t is bool:
            out.append(true_b if v else false_b)
        elif t is int:
            out += (tag_long, long_bytes(v))
        elif t is float:
            out += (tag_double, _DOUBLE(v))
        elif t is dict:
            out.append(tag_map)
            mapping(v, out, depth)
        elif t is list:
            if depth > MAX_META_DEPTH:
                raise NotEncodable
            out.append(tag_list)
            if v:
                out.append(long_bytes(len(v)))
                for item in v:
                    value(item, out, depth + 1)
            out.append(b"\x00")
        elif t is bytes:
            out += (tag_bytes, long_bytes(len(v)), v)
        elif isinstance(v, bool):
            value(bool(v), out, depth)
        elif isinstance(v, int):
            value(int(v), out, depth)
        elif isinstance(v, float):
            value(float(v), out, depth)
        elif isinstance(v, str):
            value(str(v), out, depth)
        elif isinstance(v, (bytearray, memoryview)):
            value(bytes(v), out, depth)
        else:
            raise NotEncodable

    def mapping(m: dict[str, Any], out: list[bytes], depth: int) -> None:
        if depth > MAX_META_DEPTH:
            raise NotEncodable
        if m:
            out.append(long_bytes(len(m)))
            for k, v in m.items():
                if "\x00" in k:
                    raise NotEncodable
                kb = k.encode()
                out += (long_bytes(len(kb)), kb)
                value(v, out, depth + 1)
        out.append(b"\x00")

    def encode(m: dict[str, Any]) -> bytes:
        if type(m) is not dict:
            raise NotEncodable
        out: list[bytes] = []
        mapping(m, out, 0)
        return b"".join(out)

    return encode


# ---------------------------------------------------------------- SpaceSpec

_PINNED_SPECS: dict[int, Message] = {}  # id -> the spec itself (the reference keeps the id valid)


def pin_space_spec(spec: Message) -> Message:
    """Promise that `spec` is never mutated again: its Avro bytes are then cached by identity.

    Unpinned specs are cached by their serialized bytes, which costs a
    `SerializeToString` per event; a pinned one costs a dict lookup. Mutating a
    pinned spec would publish its old encoding: pin only specs you own (e.g.
    `rlmesh_stream.producer.leaves.LeafCodec.spec`). Bounded like the other memos; returns `spec`.
    """
    if len(_PINNED_SPECS) >= MEMO_LIMIT:
        _PINNED_SPECS.clear()
    _PINNED_SPECS[id(spec)] = spec
    return spec


class SpaceSpecEncoder(SchemaWalk):
    """Avro bytes of a protobuf SpaceSpec, walking the Avro schema with the message.

    The Avro records mirror the protobuf messages field for field (same names),
    and a protobuf oneof maps to an Avro union whose branch is the set member's
    message type (or its scalar type). Results are cached per serialized spec,
    and per object for a spec pinned with `pin_space_spec`.
    """

    _PRIMITIVE_OF_PROTO: ClassVar[dict[int, str]] = {
        8: "boolean", 3: "long", 1: "double", 9: "string", 12: "bytes",
    }

    def __init__(self, schema: dict[str, Any]) -> None:
        super().__init__(schema)
        self._root = schema
        self._cache: dict[bytes, bytes] = {}
        self._by_id: dict[int, tuple[Message, bytes]] = {}  # pinned specs only

    def __call__(self, spec: Message) -> bytes:
        pinned = self._by_id.get(id(spec))
        if pinned is not None and pinned[0] is spec:
            return pinned[1]
        key = spec.SerializeToString(deterministic=True)
        hit = self._cache.get(key)
        if hit is None:
            out: list[bytes] = []
            self._record(self._root, spec, out)
            hit = b"".join(out)
            if len(self._cache) >= MEMO_LIMIT:
                self._cache.clear()
            self._cache[key] = hit
        if _PINNED_SPECS.get(id(spec)) is spec:
            if len(self._by_id) >= MEMO_LIMIT:
                self._by_id.clear()
            self._by_id[id(spec)] = (spec, hit)
        return hit

    def _record(self, node: dict[str, Any], msg: Message, out: list[bytes]) -> None:
        for f in node["fields"]:
            t = f["type"]
            if isinstance(t, list):  # a protobuf oneof
                self._oneof(f["name"], t, msg, out)
            else:
                self._value(t, getattr(msg, f["name"]), out)

    def _oneof(self, name: str, branches: list[Any], msg: Message, out: list[bytes]) -> None:
        member = msg.WhichOneof(name)
        if member is None:
            out.append(ZZ[branches.index("null")])
            return
        fd = msg.DESCRIPTOR.fields_by_name[member]
        want = (fd.message_type.full_name if fd.message_type is not None
                else self._PRIMITIVE_OF_PROTO[fd.type])
        for i, b in enumerate(branches):
            b_name = b if isinstance(b, str) else f"{b['namespace']}.{b['name']}"
            if b_name == want:
                out.append(ZZ[i])
                self._value(b, getattr(msg, member), out)
                return
        raise NotEncodable

    def _value(self, t: Any, v: Any, out: list[bytes]) -> None:
        t = self.define(t)
        kind = t if isinstance(t, str) else t["type"]
        if kind == "record":
            self._record(t, v, out)
        elif kind == "enum":
            out.append(long_bytes(v))  # the protobuf enum number is the symbol index
        elif kind == "array":
            if len(v):
                out.append(long_bytes(len(v)))
                for item in v:
                    self._value(t["items"], item, out)
            out.append(b"\x00")
        elif kind == "long":
            out.append(long_bytes(v))
        elif kind == "boolean":
            out.append(_BOOL[v])
        elif kind == "string":
            if "\x00" in v:
                raise NotEncodable  # no event string holds NUL, a space's names neither
            b = v.encode()
            out += (long_bytes(len(b)), b)
        elif kind == "bytes":
            out += (long_bytes(len(v)), v)
        else:
            raise NotEncodable

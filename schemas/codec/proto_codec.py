"""Event dataclasses <-> protobuf messages, derived from the message descriptors.

The `.proto` messages mirror the dataclasses field for field (same names), so
one converter per message is planned from its descriptor: nested messages
recurse, `Leaves` wraps an `Option<Vec<Bytes>>`, `MetaMap` maps to rlmesh's
`MetaMap`/`MetaValue`, enum members map to `<ENUM_PREFIX>_<MEMBER>` numbers,
proto3 `optional` keeps `None` apart from zero. The contract's range and
alignment checks are the Avro schema's (`rlmesh_stream.schemas.contract.validate`), so both formats
accept exactly the same events.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable
from typing import Any

from google.protobuf import descriptor
from google.protobuf.message import DecodeError as ProtoDecodeError
from google.protobuf.message import Message

from rlmesh_stream.schemas.codec.wire import read_message_index
from rlmesh_stream.schemas.contract import bindings as bd
from rlmesh_stream.schemas.contract._pb.rlmesh.spaces.v1 import spaces_pb2
from rlmesh_stream.schemas.contract.avro import load_schema
from rlmesh_stream.schemas.contract.errors import (
    ContractError,
    CorruptPayloadError,
    UnknownSchemaIdError,
)
from rlmesh_stream.schemas.contract.events import Leg, SpaceSpec
from rlmesh_stream.schemas.contract.topics import EVENT_TYPES, EventType
from rlmesh_stream.schemas.contract.validate import MAX_META_DEPTH, diagnose
from rlmesh_stream.schemas.errors import RlmeshStreamError
from rlmesh_stream.schemas.registry.proto_defs import PACKAGE, message_class

_LEAVES = f"{PACKAGE}.Leaves"
_I64_MAX = 2**63 - 1


class _Unencodable(RlmeshStreamError):
    pass


# ---------------------------------------------------------------- MetaMap

def meta_value_to_proto(v: Any, out: spaces_pb2.MetaValue, depth: int = 1) -> None:
    t = type(v)
    if t is bool or isinstance(v, bool):
        out.bool = bool(v)
    elif t is int or isinstance(v, int):
        out.integer = int(v)
    elif t is float or isinstance(v, float):
        out.number = float(v)
    elif t is str or isinstance(v, str):
        out.text = _text(str(v))
    elif isinstance(v, (bytes, bytearray, memoryview)):
        out.bytes = bytes(v)
    elif isinstance(v, (list, dict)) and depth > MAX_META_DEPTH:
        raise _Unencodable("MetaMap too deep")
    elif isinstance(v, list):
        items = out.list.items
        out.list.SetInParent()
        for item in v:
            meta_value_to_proto(item, items.add(), depth + 1)
    elif isinstance(v, dict):
        out.map.SetInParent()
        meta_map_to_proto(v, out.map, depth)
    else:
        raise _Unencodable(f"unsupported MetaMap value {type(v).__name__}")


def meta_map_to_proto(m: dict[str, Any], out: spaces_pb2.MetaMap | None = None,
                      depth: int = 0) -> spaces_pb2.MetaMap:
    out = spaces_pb2.MetaMap() if out is None else out
    for k, v in m.items():
        meta_value_to_proto(v, out.entries[_text(k)], depth + 1)
    return out


def meta_value_from_proto(v: spaces_pb2.MetaValue) -> Any:
    kind = v.WhichOneof("kind")
    if kind == "list":
        return [meta_value_from_proto(x) for x in v.list.items]
    if kind == "map":
        return meta_map_from_proto(v.map)
    if kind is None:
        raise CorruptPayloadError("MetaValue with no kind set")
    return _text(v.text) if kind == "text" else getattr(v, kind)


def meta_map_from_proto(m: spaces_pb2.MetaMap) -> dict[str, Any]:
    return {_text(k): meta_value_from_proto(v) for k, v in m.entries.items()}


# ---------------------------------------------------------------- enums

def _enum_prefix(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).upper()


def _enum_tables(cls: type[enum.Enum], ed: descriptor.EnumDescriptor
                 ) -> tuple[dict[enum.Enum, int], dict[int, enum.Enum]]:
    prefix = _enum_prefix(ed.name)
    to_num: dict[enum.Enum, int] = {}
    for member in cls:
        name = f"{prefix}_UNSPECIFIED" if member.name == "UNKNOWN" else f"{prefix}_{member.name}"
        to_num[member] = ed.values_by_name[name].number
    return to_num, {n: m for m, n in to_num.items()}


# ---------------------------------------------------------------- planning

Conv = Callable[[Any], Any]


def _ident(v: Any) -> Any:
    return v


def _text(v: str) -> str:
    """A string field: no event string holds U+0000 (the contract; PostgreSQL text)."""
    if "\x00" in v:
        raise CorruptPayloadError("a string holds U+0000 (NUL), which the contract forbids")
    return v


def _texts(v: Any) -> list[str]:
    return [_text(x) for x in v]


class _Planner:
    """Builds, per message, dataclass->message and message->dataclass converters."""

    def __init__(self) -> None:
        self.to: dict[str, Conv] = {}
        self.frm: dict[str, Conv] = {}
        self.u64: dict[str, set[str]] = {}
        self.nullable: dict[str, set[str]] = {}  # Rust Option fields, per record
        for et in EVENT_TYPES:
            self._collect_u64(load_schema(et))

    def _collect_u64(self, node: Any) -> None:
        if isinstance(node, list):
            for n in node:
                self._collect_u64(n)
        elif isinstance(node, dict):
            if node.get("type") == "record":
                self.u64.setdefault(node["name"], set()).update(
                    f["name"] for f in node["fields"] if f.get("rust_type") == "u64")
                self.nullable.setdefault(node["name"], set()).update(
                    f["name"] for f in node["fields"]
                    if isinstance(f["type"], list) and "null" in f["type"])
                for f in node["fields"]:
                    self._collect_u64(f["type"])
            elif node.get("type") == "array":
                self._collect_u64(node["items"])

    def encoder(self, md: descriptor.Descriptor) -> Conv:
        if md.full_name in self.to:
            return self.to[md.full_name]
        cls = bd.RECORD_CLASSES[f"{PACKAGE}.{md.name}"]
        from google.protobuf import message_factory

        msg_cls = message_factory.GetMessageClass(md)
        u64 = self.u64.get(md.name, set())
        nullable = self.nullable.get(md.name, set())
        ns: dict[str, Any] = {"cls": cls, "msg_cls": msg_cls, "_Unencodable": _Unencodable,
                              "isinstance": isinstance}
        lines = ["def encode(o):",
                 "    if type(o) is not cls and not isinstance(o, cls):",
                 "        raise _Unencodable('wrong type')"]
        kwargs = []
        for i, fd in enumerate(md.fields):
            conv = self._field_to(fd)
            v = f"v{i}"
            lines.append(f"    {v} = o.{fd.name}")
            if fd.name not in nullable:  # proto3 would silently write the zero value
                lines.append(f"    if {v} is None: raise _Unencodable('{fd.name} is None')")
            if fd.name in u64:
                lines.append(f"    if {v} is not None and {v} > {_I64_MAX}: "
                             f"raise _Unencodable('{fd.name} above i64')")
            if conv is _ident:
                kwargs.append(f"{fd.name}={v}")
            else:
                ns[f"c{i}"] = conv
                call = f"c{i}({v})"
                if fd.name in nullable:
                    call = f"None if {v} is None else {call}"
                kwargs.append(f"{fd.name}={call}")
        lines.append(f"    return msg_cls({', '.join(kwargs)})")
        exec(compile("\n".join(lines), f"<protobuf encoder {md.name}>", "exec"), ns)
        encode: Conv = ns["encode"]
        self.to[md.full_name] = encode
        return encode

    def _field_to(self, fd: descriptor.FieldDescriptor) -> Conv:
        if fd.message_type is not None:
            name = fd.message_type.full_name
            if name == "rlmesh.spaces.v1.MetaMap":
                inner: Conv = meta_map_to_proto
            elif name == "rlmesh.spaces.v1.SpaceSpec":
                inner = _space_spec_to
            elif name == _LEAVES:
                leaves_cls = _leaves_class(fd)
                return lambda v: leaves_cls(leaves=v)
            else:
                inner = self.encoder(fd.message_type)
            if fd.is_repeated:
                return lambda v: [inner(x) for x in v]
            return inner
        if fd.enum_type is not None:
            cls = bd.ENUM_CLASSES[f"{PACKAGE}.{fd.enum_type.name}"]
            to_num, _ = _enum_tables(cls, fd.enum_type)
            return to_num.__getitem__
        if fd.is_repeated and fd.type == descriptor.FieldDescriptor.TYPE_BOOL:
            return _bool_flags
        if fd.type == descriptor.FieldDescriptor.TYPE_STRING:
            return _texts if fd.is_repeated else _text
        return _ident

    def decoder(self, md: descriptor.Descriptor) -> Conv:
        if md.full_name in self.frm:
            return self.frm[md.full_name]
        cls = bd.RECORD_CLASSES[f"{PACKAGE}.{md.name}"]
        ns: dict[str, Any] = {"cls": cls}
        kwargs = []
        for i, fd in enumerate(md.fields):
            name, optional, conv = self._field_from(fd)
            value = f"m.{name}"
            if conv is not _ident:
                ns[f"c{i}"] = conv
                value = f"c{i}({value})"
            if optional:
                value = f"{value} if m.HasField('{name}') else None"
            kwargs.append(f"{name}={value}")
        source = f"def decode(m):\n    return cls({', '.join(kwargs)})"
        exec(compile(source, f"<protobuf decoder {md.name}>", "exec"), ns)
        decode: Conv = ns["decode"]
        self.frm[md.full_name] = decode
        return decode

    def _field_from(self, fd: descriptor.FieldDescriptor) -> tuple[str, bool, Conv]:
        optional = fd.has_presence and not fd.is_repeated
        if fd.message_type is not None:
            name = fd.message_type.full_name
            if name == "rlmesh.spaces.v1.MetaMap":
                return fd.name, optional, meta_map_from_proto
            if name == "rlmesh.spaces.v1.SpaceSpec":
                return fd.name, False, _space_spec_from
            if name == _LEAVES:
                return fd.name, optional, lambda v: list(v.leaves)
            inner = self.decoder(fd.message_type)
            if fd.is_repeated:
                return fd.name, False, lambda v: [inner(x) for x in v]
            return fd.name, False, inner
        if fd.enum_type is not None:
            cls = bd.ENUM_CLASSES[f"{PACKAGE}.{fd.enum_type.name}"]
            _, from_num = _enum_tables(cls, fd.enum_type)
            ed = fd.enum_type

            def enum_from(n: int) -> Any:
                member = from_num.get(n)
                if member is None:
                    if cls is Leg:  # rlmesh's legs are not public: keep room for more
                        return Leg.UNKNOWN
                    raise CorruptPayloadError(f"{fd.full_name}: {n} is no {ed.full_name} value "
                                              "this reader knows (0 is never written)")
                return member

            return fd.name, False, enum_from
        if fd.type == descriptor.FieldDescriptor.TYPE_STRING:
            return fd.name, optional, _texts if fd.is_repeated else _text
        if fd.is_repeated:
            return fd.name, False, list
        return fd.name, optional, _ident


def _bool_flags(v: list[bool]) -> list[bool]:
    """Protobuf would coerce 2 to True: a flag vector must hold only bools (or 0/1)."""
    if bytes(v).translate(None, b"\x00\x01"):
        raise _Unencodable("non-bool flag")
    return v


def _leaves_class(fd: descriptor.FieldDescriptor) -> Any:
    from google.protobuf import message_factory

    return message_factory.GetMessageClass(fd.message_type)


def _space_spec_to(v: Any) -> Any:
    if not isinstance(v, SpaceSpec):
        raise _Unencodable("not a SpaceSpec")
    return v


def _space_spec_from(v: Message) -> SpaceSpec:
    out = SpaceSpec()
    out.CopyFrom(v)
    return out


_PLANNER = _Planner()


# ---------------------------------------------------------------- public

def proto_encoder(event_type: EventType) -> Callable[[Any], bytes]:
    """Event -> protobuf message bytes; ContractError for a value the contract cannot carry."""
    md = message_class(event_type).DESCRIPTOR
    to_msg = _PLANNER.encoder(md)
    schema = load_schema(event_type)
    groups = schema.get("lane_aligned", [])

    def encode(event: Any) -> bytes:
        try:
            for group in groups:
                n = len(getattr(event, group[0]))
                for name in group[1:]:
                    if len(getattr(event, name)) != n:
                        raise _Unencodable("misaligned lanes")
            return to_msg(event).SerializeToString()  # type: ignore[no-any-return]
        except Exception as exc:
            found = diagnose(event)
            if found is not None:
                raise found from exc
            raise ContractError(type(event).__name__, "?", event,
                                f"cannot be encoded as protobuf: {exc!r}") from exc

    return encode


def proto_decoder(event_type: EventType) -> Callable[[bytes | memoryview], Any]:
    """Protobuf message bytes -> event dataclass."""
    cls = message_class(event_type)
    from_msg = _PLANNER.decoder(cls.DESCRIPTOR)
    name = event_type.event_class.__name__

    def decode(payload: bytes | memoryview) -> Any:
        try:
            msg = cls.FromString(bytes(payload))
        except ProtoDecodeError as exc:
            raise CorruptPayloadError(f"{name}: protobuf payload does not parse: {exc}") from exc
        try:
            return from_msg(msg)
        except CorruptPayloadError:
            raise
        except Exception as exc:
            raise CorruptPayloadError(f"{name}: decoded message does not fit the event: "
                                      f"{exc!r}") from exc

    return decode


_TOKEN = re.compile(
    r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|[{};]|\w+(?:\.\w+)*',
    re.DOTALL,
)


def top_level_messages(schema_text: str) -> tuple[str, list[str]]:
    """(package, names of the top-level messages in order) of a .proto text."""
    package = ""
    messages: list[str] = []
    depth = 0
    tokens = [t for t in _TOKEN.findall(schema_text) if not t.startswith(("//", "/*"))]
    for i, tok in enumerate(tokens):
        if tok == "{":
            depth += 1
        elif tok == "}":
            depth -= 1
        elif depth == 0 and tok == "package" and i + 1 < len(tokens):
            package = tokens[i + 1]
        elif depth == 0 and tok == "message" and i + 1 < len(tokens):
            messages.append(tokens[i + 1])
    return package, messages


_BY_MESSAGE = {f"{PACKAGE}.{et.event_class.__name__}": et for et in EVENT_TYPES}


def framed_reader(schema_id: int, schema_text: str) -> Callable[[bytes], Any]:
    """Reader of framed protobuf values written with the registry schema `schema_id`.

    The message-index path in each value picks the message within the schema;
    it must be one of our event messages, read with our compiled class (fields
    a newer writer added are skipped as unknown fields).
    """
    package, messages = top_level_messages(schema_text)
    decoders: dict[tuple[int, ...], tuple[EventType, Callable[[Any], Any]]] = {}
    for i, msg in enumerate(messages):
        et = _BY_MESSAGE.get(f"{package}.{msg}")
        if et is not None:
            decoders[(i,)] = (et, proto_decoder(et))
    if not decoders:
        raise UnknownSchemaIdError(
            f"schema id {schema_id} (protobuf package {package!r}, messages {messages}) "
            "holds no runtime event message")

    def reader(value: bytes) -> Any:
        path, offset = read_message_index(value, 5)
        hit = decoders.get(path)
        if hit is None:
            raise UnknownSchemaIdError(
                f"schema id {schema_id}: message index {list(path)} is not a runtime event")
        return hit[1](memoryview(value)[offset:])

    first = next(iter(decoders.values()))[0]
    reader.event_type = first  # type: ignore[attr-defined]
    return reader

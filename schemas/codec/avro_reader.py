"""Avro payload -> event dataclass, for any writer schema of one of our events.

fastavro does the reading and the schema resolution (writer schema as
registered -> our reader schema, so old and new versions both land in today's
dataclasses), once `avro_guard` has checked the payload (fastavro's reader has no
depth limit); a converter derived from the reader schema then turns its dicts
into the dataclasses, plain MetaMap dicts and protobuf SpaceSpecs. Unions with
several record branches are read with `return_record_name` so the branch
(`MetaList` vs `MetaMap`, `UniformBounds` vs `ElementwiseBounds`) is explicit.
"""

from __future__ import annotations

import functools
import io
from collections.abc import Callable
from typing import Any, NoReturn

import fastavro

from rlmesh_stream.schemas.codec.avro_guard import PayloadGuard
from rlmesh_stream.schemas.codec.avro_protos import space_spec_from_avro
from rlmesh_stream.schemas.codec.decoders import Reader, decoder_for
from rlmesh_stream.schemas.codec.schema_walk import SchemaWalk, full_name
from rlmesh_stream.schemas.contract import bindings as bd
from rlmesh_stream.schemas.contract.avro import load_schema
from rlmesh_stream.schemas.contract.errors import CorruptPayloadError
from rlmesh_stream.schemas.contract.topics import EventType

Converter = Callable[[Any], Any]


def _identity(v: Any) -> Any:
    return v


def _meta_value(v: Any) -> Any:
    if type(v) is tuple:
        name, body = v
        if name == bd.META_MAP:
            return {k: _meta_value(x) for k, x in body["entries"].items()}
        return [_meta_value(x) for x in body["items"]]
    return v


def _meta_map(v: dict[str, Any]) -> dict[str, Any]:
    return {k: _meta_value(x) for k, x in v["entries"].items()}


class _Builder(SchemaWalk):
    """Derives dict -> Python converters from the reader schema."""

    def __init__(self) -> None:
        super().__init__()
        self.records: dict[str, Converter] = {}

    def converter(self, t: Any) -> Converter:
        t = self.define_all(t)
        if isinstance(t, list):
            others = [b for b in t if b != "null"]
            inner = self.converter(others[0])
            if inner is _identity:
                return _identity
            return lambda v: None if v is None else inner(v)
        if isinstance(t, str):
            return _identity
        kind = t["type"]
        if kind == "enum":
            cls = bd.ENUM_CLASSES[full_name(t)]
            members = {m.name: m for m in cls}
            return members.__getitem__
        if kind == "array":
            item = self.converter(t["items"])
            if item is _identity:
                return _identity
            return lambda v: [item(x) for x in v]
        if kind == "record":
            return self.record(t)
        return _identity

    def record(self, t: dict[str, Any]) -> Converter:
        full = full_name(t)
        if full == bd.META_MAP:
            return _meta_map
        if full == bd.SPACE_SPEC:
            return space_spec_from_avro
        if full in self.records:
            return self.records[full]
        cls = bd.RECORD_CLASSES[full]
        plan: list[tuple[str, Converter]] = []

        def convert(d: dict[str, Any]) -> Any:
            return cls(**{name: conv(d[name]) for name, conv in plan})

        self.records[full] = convert
        plan.extend((f["name"], self.converter(f["type"])) for f in t["fields"])
        return convert


_PROJECTIONS: dict[tuple[EventType, tuple[Any, ...], Reader], Any] = {}


def warm_projection(event_type: EventType, items: list[Any]) -> Any:
    """A reader of `items` of whole framed values, compiled once per event type and items
    (one per schema id otherwise; consumers compile theirs ahead, during the group join):
    the generated Python one (`avro_fastread.compile_projection`). Refuses what
    `_whole_record` refuses, with its errors."""
    choice = decoder_for(event_type, projection=True)
    key = (event_type, tuple(items), choice.reader)
    project = _PROJECTIONS.get(key)
    if project is None:
        from rlmesh_stream.schemas.codec.avro_fastread import Framing, compile_projection

        name = event_type.event_class.__name__
        framing = Framing(5, functools.partial(_refused, name),
                          functools.partial(_trailing, name))
        project = compile_projection(event_type, items, framed=framing)
        _PROJECTIONS[key] = project
    return project


class AvroReader:
    """Reads payloads of one writer schema into one event type's dataclasses."""

    def __init__(self, event_type: EventType, writer_schema: dict[str, Any] | None = None,
                 named_schemas: dict[str, Any] | None = None, *, generated: bool = True) -> None:
        """`generated=False` always reads through fastavro, even when the generated reader
        (`avro_fastread`) could be used: the baseline it is benchmarked against."""
        reader = load_schema(event_type)
        self.event_type = event_type
        self._reader = fastavro.parse_schema(reader)
        self._fast: Callable[[bytes, int], tuple[Any, int]] | None = None
        if writer_schema is None:
            self._writer = self._reader
            self._resolve: Any = None
        else:
            self._writer = fastavro.parse_schema(writer_schema, named_schemas=named_schemas)
            self._resolve = self._reader
        self.choice = decoder_for(event_type, self._writer, generated=generated)
        if self.choice.reader is Reader.GENERATED:
            from rlmesh_stream.schemas.codec.avro_fastread import compile_reader

            self._fast = compile_reader(event_type)[0]
        self._convert = _Builder().record(reader)
        self._guard: PayloadGuard | None = None  # made when first needed (foreign writers)

    def __call__(self, payload: bytes | memoryview) -> Any:
        if self._fast is not None:
            return self._read_fast(bytes(payload), 0)
        return self._read_resolved(payload)

    def read_at(self, value: bytes, offset: int) -> Any:
        """Decode the record starting at `offset` of `value` (a framed record: no copy)."""
        if self._fast is not None:
            return self._read_fast(value, offset)
        return self._read_resolved(memoryview(value)[offset:])

    def framed_reader(self) -> Callable[[bytes], Any] | None:
        """A framed value (5-byte Confluent header) -> event, when the writer schema is
        ours (the generated decoder, one call per record); None otherwise."""
        fast = self._fast
        if fast is None:
            return None
        name = self.event_type.event_class.__name__

        def read(value: bytes) -> Any:
            if type(value) is not bytes:
                value = bytes(value)
            return _whole_record(name, fast, value, 5)

        return read

    def framed_projector(self, items: list[Any]) -> Callable[[bytes, Any], tuple[Any, ...]] | None:
        """A framed value -> only `items` of it (`avro_fastread.compile_projection`), when the
        writer schema is ours; None otherwise. Refuses what `framed_reader` refuses."""
        if self._fast is None:
            return None
        return warm_projection(self.event_type, items)  # type: ignore[no-any-return]

    def _read_fast(self, b: bytes, offset: int) -> Any:
        return _whole_record(self.event_type.event_class.__name__, self._fast, b, offset)

    def _read_resolved(self, payload: bytes | memoryview) -> Any:
        if self._guard is None:
            self._guard = PayloadGuard(self._writer)
        try:  # fastavro's reader has no depth limit: checked first (avro_guard)
            self._guard.end_of(bytes(payload), 0)
        except Exception as exc:
            raise CorruptPayloadError(
                f"{self.event_type.event_class.__name__}: Avro payload does not decode "
                f"with its writer schema: {exc!r}") from exc
        buf = io.BytesIO(payload)
        try:
            data = fastavro.schemaless_reader(
                buf, self._writer, self._resolve,
                return_record_name=True, return_record_name_override=True,
            )
        except Exception as exc:
            raise CorruptPayloadError(
                f"{self.event_type.event_class.__name__}: Avro payload does not decode "
                f"with its writer schema: {exc!r}") from exc
        if buf.tell() != len(payload):
            raise CorruptPayloadError(
                f"{self.event_type.event_class.__name__}: {len(payload) - buf.tell()} "
                "trailing bytes after the Avro record")
        try:
            return self._convert(data)
        except Exception as exc:
            raise CorruptPayloadError(
                f"{self.event_type.event_class.__name__}: decoded record does not fit "
                f"the event type: {exc!r}") from exc


def _whole_record(name: str, decode: Any, value: bytes, offset: int, *args: Any) -> Any:
    """`decode(value, offset, *args)` as one whole record of `value`: a failure, or bytes
    left after the record, is a CorruptPayloadError naming the event class."""
    try:
        result, end = decode(value, offset, *args)
    except Exception as exc:
        _refused(name, exc)
    if end != len(value):
        _trailing(name, len(value) - end)
    return result


def _refused(name: str, exc: Exception) -> NoReturn:
    raise CorruptPayloadError(
        f"{name}: Avro payload does not decode with its writer schema: {exc!r}") from exc


def _trailing(name: str, left: int) -> NoReturn:
    raise CorruptPayloadError(f"{name}: {left} trailing bytes after the Avro record")

"""Serialisation of runtime events in the Confluent wire format, Avro or Protobuf.

Split in three so the producer's hot path never waits on the registry:
`EventEncoder` turns an event into schemaless payload bytes (no registry),
`SchemaRegistrar` knows each topic's schema id (one registry call per topic,
cached), `frame` puts the two together. `EventSerializer` is the convenience of
all three. `EventDecoder` reads any framed value of either format back into
the same dataclasses, by the schema id in its header.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from rlmesh_stream.schemas.codec.avro_reader import AvroReader
from rlmesh_stream.schemas.codec.wire import FORMATS, Format, frame, schema_id_of
from rlmesh_stream.schemas.connection.config import DEFAULT_TOPIC_PREFIX
from rlmesh_stream.schemas.contract.errors import (
    BadMagicByteError,
    ContractError,
    CorruptPayloadError,
    DecodeError,
    RegistryUnavailableError,
    UnknownSchemaIdError,
)
from rlmesh_stream.schemas.contract.events import RuntimeEvent
from rlmesh_stream.schemas.contract.topics import EVENT_TYPES, EventType
from rlmesh_stream.schemas.registry import client as registry

Encode = Callable[[Any], bytes]
log = logging.getLogger(__name__)

UNKNOWN_ID_TTL = 30.0
"""Seconds an id the registry did not know is refused without asking it again."""


def _proto_encoders() -> dict[type, Encode]:
    from rlmesh_stream.schemas.codec import proto_codec

    return {et.event_class: proto_codec.proto_encoder(et) for et in EVENT_TYPES}


class EventEncoder:
    """Event -> schemaless payload (Avro binary or protobuf message bytes); no registry.

    Validates on the way: a value the contract cannot carry raises ContractError
    naming the event, the field and the value.
    """

    __slots__ = ("_by_class", "format")

    def __init__(self, format: Format = "avro") -> None:
        if format not in FORMATS:
            raise ValueError(f"unknown format {format!r}: 'avro' or 'protobuf'")
        self.format: Format = format
        from rlmesh_stream.schemas.codec.avro_writer import avro_writer  # a consumer never needs it

        self._by_class: dict[type, Encode] = (
            {et.event_class: avro_writer(et) for et in EVENT_TYPES}
            if format == "avro" else _proto_encoders()
        )

    def encode(self, event: RuntimeEvent) -> bytes:
        try:
            enc = self._by_class[type(event)]
        except KeyError:
            raise ContractError(type(event).__name__, "<event>", event,
                                "not a runtime event type") from None
        return enc(event)

    __call__ = encode


class EventSerializer:
    """Event -> framed record value: `frame(registrar.schema_id(type), encoder.encode(event))`."""

    def __init__(self, registry_client: Any, format: Format = "avro",
                 topic_prefix: str = DEFAULT_TOPIC_PREFIX, auto_register: bool = True) -> None:
        from rlmesh_stream.schemas.registry.registrar import SchemaRegistrar

        self.encoder = EventEncoder(format)
        self.registrar = SchemaRegistrar(registry_client, format, topic_prefix, auto_register)
        self.format: Format = format

    def serialize(self, event: RuntimeEvent) -> bytes:
        payload = self.encoder.encode(event)
        return frame(self.registrar.schema_id(EventType.of(event)), payload, self.format)

    __call__ = serialize


_Reader = Callable[[bytes], RuntimeEvent]


class EventDecoder:
    """Framed record value (Avro or Protobuf) -> the event dataclass, exactly as encoded.

    The writer's schema is fetched by the id in the header once and cached, so
    a record written with an older or newer compatible schema is resolved into
    today's dataclasses. `reader_format` is the format whose schemas are this
    decoder's reader view (Avro resolution always uses our `.avsc` files;
    protobuf records are read with our compiled messages); values of either
    format decode.
    """

    def __init__(self, registry_client: Any, reader_format: Format = "avro") -> None:
        if reader_format not in FORMATS:
            raise ValueError(f"unknown format {reader_format!r}: 'avro' or 'protobuf'")
        self.client = registry_client
        self.reader_format: Format = reader_format
        self._readers: dict[int, _Reader] = {}
        self._unknown: dict[int, tuple[float, UnknownSchemaIdError]] = {}
        self._lock = threading.Lock()

    def decode(self, value: bytes) -> RuntimeEvent:
        if value is None:
            raise BadMagicByteError("value is null (a tombstone), not a framed event")
        sid = schema_id_of(value)
        reader = self._readers.get(sid)
        if reader is None:
            reader = self._reader(sid)
        return reader(value)

    __call__ = decode

    def choice_of(self, value: bytes) -> Any:
        """Which reader decodes whole events of a framed value's schema id, and why (a
        `decoders.DecoderChoice`; None for protobuf)."""
        sid = schema_id_of(value)
        reader = self._readers.get(sid) or self._reader(sid)
        return getattr(reader, "choice", None)

    def projector(self, value: bytes, items: list[Any]
                  ) -> tuple[EventType, Callable[[bytes, Any], tuple[Any, ...]] | None]:
        """For the schema id of a framed value: its event type, and a reader of only `items`
        of such values (`AvroReader.framed_projector`) when its writer schema is ours
        (None otherwise: decode whole events). Raises as `decode` does for the id."""
        sid = schema_id_of(value)
        reader = self._readers.get(sid) or self._reader(sid)
        make = getattr(reader, "projector", None)
        return reader.event_type, (None if make is None else make(items))  # type: ignore[attr-defined]

    def _reader(self, sid: int) -> _Reader:
        with self._lock:
            reader = self._readers.get(sid)
            if reader is None:
                refused = self._unknown.get(sid)
                if refused is not None and time.monotonic() - refused[0] < UNKNOWN_ID_TTL:
                    raise refused[1]  # a flood of garbage must not become a flood of lookups
                try:
                    reader = self._readers[sid] = self._load(sid)
                except UnknownSchemaIdError as exc:
                    self._unknown[sid] = (time.monotonic(), exc)
                    raise
        return reader

    def _load(self, sid: int) -> _Reader:
        try:
            schema = registry.call(f"fetch schema {sid}", self.client.get_schema, sid)
        except registry.registry_errors() as exc:
            if registry.is_not_found(exc):
                raise UnknownSchemaIdError(f"schema id {sid} is not in the registry") from exc
            raise RegistryUnavailableError(f"schema registry refused schema {sid}: {exc}") from exc
        kind = (schema.schema_type or "AVRO").upper()
        if kind == "AVRO":
            return _avro_reader(self.client, sid, schema)
        if kind == "PROTOBUF":
            from rlmesh_stream.schemas.codec import proto_codec

            return proto_codec.framed_reader(sid, schema.schema_str)
        raise UnknownSchemaIdError(f"schema id {sid} is a {kind} schema, not Avro or Protobuf")


def _avro_reader(client: Any, sid: int, schema: Any) -> _Reader:
    import json

    from rlmesh_stream.schemas.contract.avro import NAMESPACE

    try:
        writer = json.loads(schema.schema_str)
    except ValueError as exc:
        raise UnknownSchemaIdError(f"schema id {sid} is not valid Avro JSON: {exc}") from exc
    named = _avro_references(client, schema)
    name = writer.get("name", "") if isinstance(writer, dict) else ""
    full = name if "." in name else f"{writer.get('namespace', '')}.{name}" if name else ""
    by_name = {f"{NAMESPACE}.{et.event_class.__name__}": et for et in EVENT_TYPES}
    et = by_name.get(full)
    if et is None:
        raise UnknownSchemaIdError(
            f"schema id {sid} is Avro record {full or '<not a record>'!r}, not a runtime event")
    try:
        read = AvroReader(et, writer, named)
    except Exception as exc:
        raise UnknownSchemaIdError(
            f"schema id {sid} ({full}) cannot be resolved to our reader schema: {exc}") from exc

    log.debug("schema id %d (%s): %s", sid, full, read.choice)
    fast = read.framed_reader()
    if fast is not None:  # the writer schema is ours: the generated decoder, no wrapper
        fast.event_type = et  # type: ignore[attr-defined]
        fast.projector = read.framed_projector  # type: ignore[attr-defined]
        fast.choice = read.choice  # type: ignore[attr-defined]
        return fast

    def reader(value: bytes) -> RuntimeEvent:
        if type(value) is not bytes:
            value = bytes(value)
        return read.read_at(value, 5)

    reader.event_type = et  # type: ignore[attr-defined]
    reader.choice = read.choice  # type: ignore[attr-defined]
    return reader


def _avro_references(client: Any, schema: Any) -> dict[str, Any]:
    """Named types of the writer schema's references (registered by another producer)."""
    import json

    import fastavro

    named: dict[str, Any] = {}
    for ref in schema.references or []:
        version = registry.call(f"fetch reference {ref.subject}", client.get_version,
                                ref.subject, ref.version)
        inner = version.schema
        named.update(_avro_references(client, inner))
        fastavro.parse_schema(json.loads(inner.schema_str), named_schemas=named)
    return named


def __getattr__(name: str) -> Any:
    """`SchemaRegistrar`, imported when asked for: it needs the confluent registry client,
    whose import a consumer (which only decodes) does not pay."""
    if name == "SchemaRegistrar":
        from rlmesh_stream.schemas.registry.registrar import SchemaRegistrar

        return SchemaRegistrar
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "BadMagicByteError",
    "ContractError",
    "CorruptPayloadError",
    "DecodeError",
    "EventDecoder",
    "EventEncoder",
    "EventSerializer",
    "RegistryUnavailableError",
    "UnknownSchemaIdError",
    "frame",
]

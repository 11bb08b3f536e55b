"""The producer's view of the contract's serde: encode a payload, learn a schema id, frame.

Kept apart so the hook depends on three small protocols rather than on
`rlmesh_stream.schemas.codec.serde`'s classes, and so the one place that imports the registry
client is here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from rlmesh_stream.producer.config import Format
from rlmesh_stream.schemas.connection.config import StreamConfig
from rlmesh_stream.schemas.contract.events import RuntimeEvent
from rlmesh_stream.schemas.contract.topics import EventType


class PayloadEncoder(Protocol):
    def encode(self, event: RuntimeEvent) -> bytes: ...


class SchemaIds(Protocol):
    def schema_id(self, event_type: EventType) -> int: ...


def make_encoder(format: Format) -> PayloadEncoder:
    from rlmesh_stream.schemas.codec.serde import EventEncoder

    encoder: PayloadEncoder = EventEncoder(format=format)
    return encoder


def direct_encoders(format: Format) -> dict[EventType, Callable[..., bytes]]:
    """Per event type, the function `EventEncoder.encode` dispatches to (Avro only, else empty).

    The hook calls it directly for an event of exactly that type, saving the
    dispatch per event; the bytes are the same (it is the same function). Its
    second argument, the wire-format prefix (`frame_prefix`), is put first in
    the same join: a framed value without copying the payload.
    """
    if format != "avro":
        return {}
    from rlmesh_stream.schemas.codec.avro_writer import avro_writer

    return {et: avro_writer(et) for et in EventType}


def make_registrar(stream: StreamConfig, format: Format) -> SchemaIds:
    from confluent_kafka.schema_registry import SchemaRegistryClient

    from rlmesh_stream.schemas.codec.serde import SchemaRegistrar

    client = SchemaRegistryClient(stream.registry_config())
    registrar: SchemaIds = SchemaRegistrar(
        client, format=format, topic_prefix=stream.topic_prefix, auto_register=True
    )
    return registrar


def frame_prefix(schema_id: int, format: Format) -> bytes:
    """The bytes the Confluent wire format puts before a payload for this schema id.

    Computed once per event type so the hot path frames with one
    concatenation; checked against `frame` so it cannot drift from the contract.
    """
    from rlmesh_stream.schemas.codec.serde import frame

    prefix: bytes = frame(schema_id, b"", format=format)
    probe = b"\x02\x04probe"
    framed: Any = frame(schema_id, probe, format=format)
    if framed != prefix + probe:
        raise RuntimeError("serde.frame is not prefix + payload; cannot pre-frame")
    return prefix

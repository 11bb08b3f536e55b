"""The registry form of each event's schema, per wire format.

Avro: the self-contained `.avsc` (every named type inlined), so any Avro reader
can use the registered text alone. Protobuf: the event's `.proto` file, with
the files it imports registered as their own subjects (named by import path,
the Confluent default) and passed as schema references.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka.schema_registry import Schema, SchemaReference

from rlmesh_stream.schemas.codec.wire import Format
from rlmesh_stream.schemas.contract import avro
from rlmesh_stream.schemas.contract.topics import EventType
from rlmesh_stream.schemas.registry import proto_defs


def registry_schema(client: Any, event_type: EventType, format: Format, register: bool = True,
                    cache: dict[str, SchemaReference] | None = None) -> Schema:
    """The Schema registered for an event type's topic (registering imports when allowed)."""
    if format == "avro":
        return Schema(avro.schema_text(event_type), "AVRO")
    refs = proto_defs.references(client, event_type, register=register, cache=cache)
    return Schema(proto_defs.proto_text(event_type), "PROTOBUF", refs)

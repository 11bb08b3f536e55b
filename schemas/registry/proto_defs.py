"""The protobuf schema files of the events and their registration as references.

Each event has its own file `rlmesh/runtime/v1/<event>.proto` whose first (and
only) message is the event, so its Confluent message index is always `[0]`.
Shared types live in `rlmesh/runtime/v1/common.proto` and rlmesh's own
`rlmesh/spaces/v1/spaces.proto`; the registry stores those once, each under a
subject named by its import path (the Confluent default), and an event schema
refers to them.
"""

from __future__ import annotations

import functools
import importlib
import re
from pathlib import Path
from typing import Any

from confluent_kafka.schema_registry import Schema, SchemaReference
from confluent_kafka.schema_registry.error import SchemaRegistryError
from google.protobuf.message import Message

from rlmesh_stream.schemas.contract.errors import SchemaNotRegisteredError
from rlmesh_stream.schemas.contract.topics import EventType
from rlmesh_stream.schemas.registry import client as registry

PACKAGE = "rlmesh.runtime.v1"
# Where the generated modules of PACKAGE live (schemas/contract/_pb, written by schemas.generate).
PB_RUNTIME = "rlmesh_stream.schemas.contract._pb.rlmesh.runtime.v1"
PROTO_ROOT = Path(__file__).resolve().parents[1] / "contract" / "proto"
_IMPORT = re.compile(r'^\s*import\s+(?:public\s+|weak\s+)?"([^"]+)"\s*;', re.MULTILINE)


def proto_path(event_type: EventType) -> str:
    """Import path of an event's `.proto` file."""
    return f"rlmesh/runtime/v1/{event_type.value}.proto"


@functools.cache
def file_text(path: str) -> str:
    return (PROTO_ROOT / path).read_text(encoding="utf-8")


def proto_text(event_type: EventType) -> str:
    return file_text(proto_path(event_type))


def imports_of(text: str) -> list[str]:
    return _IMPORT.findall(text)


def message_class(event_type: EventType) -> type[Message]:
    """The generated message class of an event (`_pb.rlmesh.runtime.v1.<event>_pb2`)."""
    module = importlib.import_module(f"{PB_RUNTIME}.{event_type.value}_pb2")
    cls: type[Message] = getattr(module, event_type.event_class.__name__)
    return cls


def references(client: Any, event_type: EventType, register: bool = True,
               cache: dict[str, SchemaReference] | None = None) -> list[SchemaReference]:
    """References of an event's schema, registering the imported files when allowed."""
    cache = {} if cache is None else cache
    paths = imports_of(proto_text(event_type))
    return [_reference(client, path, register, cache) for path in paths]


def _reference(client: Any, path: str, register: bool,
               cache: dict[str, SchemaReference]) -> SchemaReference:
    hit = cache.get(path)
    if hit is not None:
        return hit
    text = file_text(path)
    refs = [_reference(client, p, register, cache) for p in imports_of(text)]
    schema = Schema(text, "PROTOBUF", refs)
    if register:
        registry.call(f"register {path}", client.register_schema, path, schema)
    try:
        found = registry.call(f"look up {path}", client.lookup_schema, path, schema)
    except SchemaRegistryError as exc:
        if registry.is_not_found(exc):
            raise SchemaNotRegisteredError(
                f"{path}: imported protobuf file is not registered and registration is off"
            ) from exc
        raise
    ref = cache[path] = SchemaReference(path, path, found.version)
    return ref

"""Schema ids for the event topics: registered on first use, or looked up.

One subject per topic (TopicNameStrategy, `{topic}-value`), each set to BACKWARD
compatibility when we register, so a consumer on today's schema can always
read what older producers wrote. With `auto_register=False` (a locked-down
registry) the id of *our exact* schema is looked up under the subject: a
producer never writes with an id whose schema differs from its encoder's.
Ids are cached per event type: the registry is touched once per topic.
"""

from __future__ import annotations

import threading
from typing import Any

from confluent_kafka.schema_registry import Schema, SchemaReference
from confluent_kafka.schema_registry.error import SchemaRegistryError

from rlmesh_stream.schemas.codec.wire import FORMATS, Format
from rlmesh_stream.schemas.connection.config import DEFAULT_TOPIC_PREFIX
from rlmesh_stream.schemas.contract.errors import (
    RegistryUnavailableError,
    SchemaNotRegisteredError,
    SubjectFormatError,
)
from rlmesh_stream.schemas.contract.topics import EVENT_TYPES, EventType, subject_name, topic_name
from rlmesh_stream.schemas.registry import client as registry
from rlmesh_stream.schemas.registry.schema_defs import registry_schema

COMPATIBILITY = "BACKWARD"


class SchemaRegistrar:
    """Registers (or looks up) each event type's schema under its topic's subject."""

    def __init__(self, registry_client: Any, format: Format = "avro",
                 topic_prefix: str = DEFAULT_TOPIC_PREFIX, auto_register: bool = True) -> None:
        if format not in FORMATS:
            raise ValueError(f"unknown format {format!r}: 'avro' or 'protobuf'")
        self.client = registry_client
        self.format: Format = format
        self.topic_prefix = topic_prefix
        self.auto_register = auto_register
        self._ids: dict[EventType, int] = {}
        self._refs: dict[str, SchemaReference] = {}
        self._lock = threading.Lock()

    def subject(self, event_type: EventType) -> str:
        return subject_name(topic_name(self.topic_prefix, event_type))

    def schema(self, event_type: EventType) -> Schema:
        """The schema as this registrar registers it (references resolved)."""
        return registry_schema(self.client, event_type, self.format,
                               register=self.auto_register, cache=self._refs)

    def schema_id(self, event_type: EventType) -> int:
        """The registry id of our schema for this event type (cached after the first call)."""
        sid = self._ids.get(event_type)
        if sid is not None:
            return sid
        with self._lock:
            sid = self._ids.get(event_type)
            if sid is None:
                sid = self._register(event_type) if self.auto_register else self._lookup(event_type)
                self._ids[event_type] = sid
        return sid

    def register_all(self) -> dict[EventType, int]:
        """Ids of every event type (registering them when allowed)."""
        return {et: self.schema_id(et) for et in EVENT_TYPES}

    def _register(self, event_type: EventType) -> int:
        subject = self.subject(event_type)
        schema = self.schema(event_type)
        try:
            sid = registry.call(f"register {subject}", self.client.register_schema, subject,
                                schema)
        except (RegistryUnavailableError, SchemaRegistryError) as exc:
            if isinstance(exc, SchemaRegistryError) or isinstance(exc.__cause__,
                                                                  SchemaRegistryError):
                self._refuse_other_format(subject)  # Apicurio answers 500 to a format switch
            raise  # unreachable or hung: asking again would only wait again
        current = registry.call(f"read compatibility of {subject}", self._compatibility, subject)
        if current != COMPATIBILITY:
            registry.call(f"set compatibility of {subject}", self.client.set_compatibility,
                          subject, COMPATIBILITY)
        return int(sid)

    def _refuse_other_format(self, subject: str) -> None:
        try:
            latest = self.client.get_latest_version(subject)
        except Exception:  # the original failure is the one to report
            return
        held = (latest.schema.schema_type or "AVRO").upper()
        if held != self.format.upper():
            raise SubjectFormatError(
                f"{subject} holds {held} schemas; a topic carries one format, so "
                f"{self.format} events need another topic prefix")

    def _compatibility(self, subject: str) -> str | None:
        try:
            return str(self.client.get_compatibility(subject))
        except SchemaRegistryError as exc:
            if registry.is_not_found(exc):
                return None
            raise

    def _lookup(self, event_type: EventType) -> int:
        subject = self.subject(event_type)
        schema = self.schema(event_type)
        try:
            found = registry.call(f"look up {subject}", self.client.lookup_schema, subject, schema)
        except SchemaRegistryError as exc:
            if registry.is_not_found(exc):
                raise SchemaNotRegisteredError(
                    f"{subject}: our {self.format} schema for "
                    f"{event_type.event_class.__name__} is not registered and registration "
                    "is off (run `rlmesh-stream schemas register`)") from exc
            raise
        return int(found.schema_id)

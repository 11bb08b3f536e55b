"""Seed records for the decoder fuzz tests (imported by conftest and the tests)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka.schema_registry import SchemaRegistryClient

from rlmesh_stream.schemas.codec.serde import EventDecoder
from rlmesh_stream.schemas.codec.wire import Format
from rlmesh_stream.schemas.contract import events as ev
from rlmesh_stream.schemas.contract.topics import EventType

_CALLBACKS = {et.value: et for et in EventType} | {"on_telemetry": EventType.TELEMETRY_SNAPSHOT}


class Collector:
    """Keeps the first event of each type the simulator emits (no Kafka involved)."""

    def __init__(self) -> None:
        self.first: dict[EventType, ev.RuntimeEvent] = {}

    def __getattr__(self, name: str) -> Callable[[Any], None]:
        if name not in _CALLBACKS:
            raise AttributeError(name)
        et = _CALLBACKS[name]
        return lambda event: self.first.setdefault(et, event)


@dataclass(frozen=True)
class Seeds:
    """Valid framed values, one per (format, event type), and the ids they use."""

    values: dict[tuple[Format, EventType], bytes] = field(repr=False)
    client: SchemaRegistryClient = field(repr=False)

    @property
    def keys(self) -> list[tuple[Format, EventType]]:
        """The (format, event type) pairs in a stable order (hypothesis needs one)."""
        return sorted(self.values, key=lambda k: (k[0], k[1].value))

    @property
    def items(self) -> list[tuple[tuple[Format, EventType], bytes]]:
        return [(k, self.values[k]) for k in self.keys]

    @property
    def known_ids(self) -> set[int]:
        return {int.from_bytes(v[1:5], "big") for v in self.values.values()}

    def decoder(self) -> EventDecoder:
        return EventDecoder(self.client)

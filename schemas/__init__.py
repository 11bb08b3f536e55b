"""The event contract: runtime event types, their schemas, serialisation and naming.

This is the one package both the producer and the consumers import. Its parts:
`contract` (the events, topics, headers, validation and the schema files), `codec`
(serialisation), `registry` (the schema registry), `connection` (settings and access),
`engines` (DDL and reader schemas for other engines). It imports nothing else of ours.
"""

from typing import TYPE_CHECKING, Any

from rlmesh_stream.schemas.connection.config import StreamConfig
from rlmesh_stream.schemas.contract.events import (
    ActionReceivedEvent,
    Advisory,
    AdvisorySeverity,
    EnvConnectedEvent,
    EpisodeCompletedEvent,
    EpisodeStartedEvent,
    Leg,
    LogEvent,
    LogLevel,
    MetaMap,
    MetaValue,
    ModelConnectedEvent,
    ObservationEmittedEvent,
    RelayAdvisoryEvent,
    RuntimeEnvContext,
    RuntimeEvent,
    SessionEndedEvent,
    SessionFailedEvent,
    SessionStartedEvent,
    StepCompletedEvent,
    TelemetrySnapshotEvent,
)
from rlmesh_stream.schemas.contract.topics import (
    EVENT_TYPES,
    EventType,
    all_topics,
    record_key,
    subject_name,
    topic_name,
)

__all__ = [
    "EVENT_TYPES",
    "ActionReceivedEvent",
    "Advisory",
    "AdvisorySeverity",
    "EnvConnectedEvent",
    "EpisodeCompletedEvent",
    "EpisodeStartedEvent",
    "EventType",
    "Leg",
    "LogEvent",
    "LogLevel",
    "MetaMap",
    "MetaValue",
    "ModelConnectedEvent",
    "ObservationEmittedEvent",
    "RelayAdvisoryEvent",
    "RuntimeEnvContext",
    "RuntimeEvent",
    "SessionEndedEvent",
    "SessionFailedEvent",
    "SessionStartedEvent",
    "SpaceSpec",
    "StepCompletedEvent",
    "StreamConfig",
    "TelemetrySnapshotEvent",
    "all_topics",
    "record_key",
    "subject_name",
    "topic_name",
]

if TYPE_CHECKING:
    from rlmesh_stream.schemas.contract.events import SpaceSpec


def __getattr__(name: str) -> Any:
    """`SpaceSpec` when first asked for (its protobuf module is imported then: `events`)."""
    if name == "SpaceSpec":
        from rlmesh_stream.schemas.contract import events

        globals()["SpaceSpec"] = events.SpaceSpec  # asked for once, as `events` does
        return events.SpaceSpec
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

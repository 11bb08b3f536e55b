"""The event contract: runtime event types, their schemas, serialisation and naming.

This is the one package both the producer and the consumers import. Its parts:
`contract` (the events, topics, headers, validation and the schema files), `codec`
(serialisation), `registry` (the schema registry), `connection` (settings and access),
`engines` (DDL and reader schemas for other engines); `errors.RlmeshStreamError`, the root
of every error rlmesh-stream raises. It imports nothing else of ours.
"""

from typing import TYPE_CHECKING, Any

from rlmesh_stream.schemas.connection.config import StreamConfig
from rlmesh_stream.schemas.contract.topics import (
    EVENT_TYPES,
    EventType,
    all_topics,
    record_key,
    subject_name,
    topic_name,
)
from rlmesh_stream.schemas.errors import RlmeshStreamError

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
    "RlmeshStreamError",
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
        SpaceSpec,
        StepCompletedEvent,
        TelemetrySnapshotEvent,
    )

# the names of `__all__` not bound above, the event types: imported when first asked for,
# as a consumer's start-up declares its tables and reads its settings without them
# (~10 ms; its decoders import them once there is a record)
_EVENTS = frozenset(__all__) - globals().keys()


def __getattr__(name: str) -> Any:
    """An event type when first asked for (`events` is imported then; `SpaceSpec`'s
    protobuf module only when it is asked for, as `events` does)."""
    if name in _EVENTS:
        from rlmesh_stream.schemas.contract import events

        value = getattr(events, name)
        globals()[name] = value  # asked for once
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

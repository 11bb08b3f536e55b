"""The event contract: runtime event types, their schemas, serialisation and naming.

This is the one package both the producer and the consumers import.
"""

from schemas.config import StreamConfig
from schemas.events import (
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
from schemas.topics import EVENT_TYPES, EventType, all_topics, record_key, subject_name, topic_name

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

"""Topic, key and subject naming: one topic per event type, keyed by session id.

Topic: `{prefix}.{event}` (prefix default `rlmesh.runtime`). Key: the
event's `session_id` as UTF-8, so all of a session's events share a partition
number across topics (co-partitioning with the murmur2 partitioner). Subject:
TopicNameStrategy, `{topic}-value`.
"""

from __future__ import annotations

import enum
import re
from typing import TYPE_CHECKING, Any

from rlmesh_stream.schemas.connection.config import DEFAULT_TOPIC_PREFIX

if TYPE_CHECKING:  # the event classes load when first asked for (`_classes`)
    from rlmesh_stream.schemas.contract import events as ev


class EventType(enum.Enum):
    """Every runtime event the pipeline carries; the value is the topic suffix."""

    ENV_CONNECTED = "env_connected"
    MODEL_CONNECTED = "model_connected"
    SESSION_STARTED = "session_started"
    SESSION_ENDED = "session_ended"
    SESSION_FAILED = "session_failed"
    LOG = "log"
    EPISODE_STARTED = "episode_started"
    EPISODE_COMPLETED = "episode_completed"
    ACTION_RECEIVED = "action_received"
    STEP_COMPLETED = "step_completed"
    OBSERVATION_EMITTED = "observation_emitted"
    RELAY_ADVISORY = "relay_advisory"
    TELEMETRY_SNAPSHOT = "telemetry_snapshot"

    @property
    def event_class(self) -> type[ev.RuntimeEvent]:
        return _classes()[self]

    def topic(self, prefix: str = DEFAULT_TOPIC_PREFIX) -> str:
        return topic_name(prefix, self)

    @classmethod
    def of(cls, event: ev.RuntimeEvent) -> EventType:
        """The event type of an event instance."""
        try:
            return _BY_CLASS[type(event)]
        except KeyError:
            pass
        if not _BY_CLASS:  # the first event asked about (one update: no thread sees half)
            _BY_CLASS.update({c: et for et, c in _classes().items()})
        try:
            return _BY_CLASS[type(event)]
        except KeyError:
            raise TypeError(f"not a runtime event: {type(event).__name__}") from None


_CLASSES: dict[EventType, type[ev.RuntimeEvent]] = {}
_BY_CLASS: dict[type, EventType] = {}


def _classes() -> dict[EventType, type[ev.RuntimeEvent]]:
    """Each event type's dataclass, imported when first needed: naming topics (a
    consumer's start-up) needs no event class (~10 ms of dataclasses)."""
    if not _CLASSES:
        from rlmesh_stream.schemas.contract import events as ev

        _CLASSES.update({  # one update: no thread sees half of it
            EventType.ENV_CONNECTED: ev.EnvConnectedEvent,
            EventType.MODEL_CONNECTED: ev.ModelConnectedEvent,
            EventType.SESSION_STARTED: ev.SessionStartedEvent,
            EventType.SESSION_ENDED: ev.SessionEndedEvent,
            EventType.SESSION_FAILED: ev.SessionFailedEvent,
            EventType.LOG: ev.LogEvent,
            EventType.EPISODE_STARTED: ev.EpisodeStartedEvent,
            EventType.EPISODE_COMPLETED: ev.EpisodeCompletedEvent,
            EventType.ACTION_RECEIVED: ev.ActionReceivedEvent,
            EventType.STEP_COMPLETED: ev.StepCompletedEvent,
            EventType.OBSERVATION_EMITTED: ev.ObservationEmittedEvent,
            EventType.RELAY_ADVISORY: ev.RelayAdvisoryEvent,
            EventType.TELEMETRY_SNAPSHOT: ev.TelemetrySnapshotEvent,
        })
    return _CLASSES


EVENT_TYPES: tuple[EventType, ...] = tuple(EventType)


MAX_MESSAGE_BYTES = 8 * 1024 * 1024
"""The largest record batch an event topic accepts (its `max.message.bytes`).

Observation payloads (image frames, batched vectors) can run to megabytes; the broker's
1 MiB default would reject them. Every client that copies a record of an event topic
elsewhere (the consumers' dead-letter producer) must accept as much."""


def topic_name(prefix: str, event_type: EventType) -> str:
    return f"{prefix}.{event_type.value}"


MAX_TOPIC_NAME_CHARS = 249  # Kafka's limit
_LEGAL_TOPIC = re.compile(r"[A-Za-z0-9._-]+")


def check_topic_name(name: str) -> str:
    """`name` if Kafka accepts it as a topic name; else ValueError saying what is wrong."""
    if not name:
        raise ValueError("a topic name cannot be empty")
    if name in (".", ".."):
        raise ValueError(f"{name!r} cannot be a topic name")
    if len(name) > MAX_TOPIC_NAME_CHARS:
        raise ValueError(f"topic name {name[:40]!r}... is {len(name)} characters long; "
                         f"Kafka allows {MAX_TOPIC_NAME_CHARS}")
    if not _LEGAL_TOPIC.fullmatch(name):
        bad = sorted({c for c in name if not _LEGAL_TOPIC.fullmatch(c)})
        raise ValueError(f"topic name {name!r} contains {''.join(bad)!r}: Kafka allows only "
                         "ASCII letters, digits, '.', '_' and '-'")
    return name


def check_topic_prefix(prefix: str) -> str:
    """`prefix` if every event topic under it is a legal topic name; else ValueError."""
    if not prefix:
        raise ValueError("the topic prefix cannot be empty")
    longest = max(EVENT_TYPES, key=lambda et: len(et.value))
    try:
        check_topic_name(topic_name(prefix, longest))
    except ValueError as exc:
        raise ValueError(f"topic prefix {prefix!r} makes illegal topic names: {exc}") from None
    return prefix


def all_topics(prefix: str = DEFAULT_TOPIC_PREFIX) -> list[str]:
    """The event topics of one deployment, in a stable order."""
    return [topic_name(prefix, et) for et in EVENT_TYPES]


def event_type_of_topic(topic: str, prefix: str = DEFAULT_TOPIC_PREFIX) -> EventType:
    """Inverse of `topic_name`; raises ValueError for a topic outside the prefix."""
    head, _, suffix = topic.rpartition(".")
    if head != prefix:
        raise ValueError(f"topic {topic!r} is not under prefix {prefix!r}")
    return EventType(suffix)


def subject_name(topic: str) -> str:
    """TopicNameStrategy: the value schema's subject for a topic."""
    return f"{topic}-value"


def confluent_serde_conf() -> dict[str, Any]:
    """Settings for confluent-kafka's own Avro/Protobuf (de)serializers reading our topics.

    Our subjects follow TopicNameStrategy. confluent-kafka 2.16 defaults to an
    "associated" strategy that first asks the registry's associations API, which
    Apicurio does not have: it answers 404, and on a keep-alive connection that
    404 has been seen never to arrive, hanging the caller (CI, twice). Naming the
    strategy skips the lookup.
    """
    from confluent_kafka.schema_registry import topic_subject_name_strategy

    return {"subject.name.strategy": topic_subject_name_strategy}


def record_key(event: ev.RuntimeEvent) -> bytes:
    """The Kafka key of an event: its session id as UTF-8."""
    return event.session_id.encode("utf-8")

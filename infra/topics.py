"""Creating the event topics with the settings the pipeline relies on.

`ensure_topics` is idempotent: a topic that exists is left alone, and any setting that
differs from what we would create (partitions, replication factor, retention, maximum
message size) is reported as drift rather than "fixed": changing partition counts
reshuffles keys across partitions and breaks per-session ordering, so that decision
belongs to a person.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    ClusterMetadata,
    ConfigResource,
    NewTopic,
    ResourceType,
    TopicMetadata,
)

from rlmesh_stream.schemas.connection.client_errors import ClientErrors
from rlmesh_stream.schemas.connection.config import StreamConfig
from rlmesh_stream.schemas.contract.topics import MAX_MESSAGE_BYTES
from rlmesh_stream.schemas.errors import RlmeshStreamError

DEFAULT_PARTITIONS = 12
DEFAULT_RETENTION_MS = 7 * 24 * 3600 * 1000
# The contract's limit (see schemas.topics.MAX_MESSAGE_BYTES); the local broker accepts
# batches up to 16 MiB.
DEFAULT_MAX_MESSAGE_BYTES = MAX_MESSAGE_BYTES
MAX_REPLICATION_FACTOR = 3
# The smallest --max-message-bytes: below it a topic would refuse ordinary events.
MIN_MAX_MESSAGE_BYTES = 64 * 1024


class TopicsError(RlmeshStreamError):
    """The topics cannot be created as asked; the message says what and why."""


def event_topics(prefix: str) -> list[str]:
    """The event topics of one deployment, as the schema contract names them."""
    from rlmesh_stream.schemas.contract.topics import all_topics

    return all_topics(prefix)


@dataclass(frozen=True)
class TopicDrift:
    topic: str
    setting: str
    expected: str
    actual: str

    def __str__(self) -> str:
        return f"{self.topic}: {self.setting} is {self.actual}, expected {self.expected}"


@dataclass
class TopicsReport:
    created: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    drift: list[TopicDrift] = field(default_factory=list)

    @property
    def drifted_topics(self) -> list[str]:
        return sorted({d.topic for d in self.drift})


def ensure_topics(
    config: StreamConfig,
    partitions: int = DEFAULT_PARTITIONS,
    replication_factor: int | None = None,
    retention_ms: int = DEFAULT_RETENTION_MS,
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    topics: Sequence[str] | None = None,
    timeout: float = 30.0,
) -> TopicsReport:
    """Create the missing topics (default: every event topic under `config.topic_prefix`).

    `replication_factor` defaults to min(3, live brokers), so the same call works on
    the one-node local stack and on a production cluster.
    """
    _check_settings(partitions, replication_factor, retention_ms, max_message_bytes)
    names = list(topics) if topics is not None else event_topics(config.topic_prefix)
    # log_level 4: keep librdkafka's warnings and errors, drop its shutdown notices.
    errors = ClientErrors()
    admin = AdminClient({**config.kafka_config(), "log_level": 4, **errors.config()})
    try:
        metadata = admin.list_topics(timeout=timeout)
    except KafkaException as exc:
        admin.poll(0)  # serves the queued client errors: the last one says why
        raise TopicsError(f"cannot reach Kafka at {config.bootstrap} within {timeout:g} s "
                          f"({errors.explain(_kafka_text(exc))}): check --bootstrap and "
                          "--security-protocol") from exc
    rf = replication_factor or min(MAX_REPLICATION_FACTOR, len(metadata.brokers))
    if rf > len(metadata.brokers):
        raise TopicsError(f"replication factor {rf} needs {rf} brokers; Kafka at "
                          f"{config.bootstrap} has {len(metadata.brokers)}")
    settings = {"retention.ms": str(retention_ms), "max.message.bytes": str(max_message_bytes)}

    report = TopicsReport()
    missing = [n for n in names if n not in metadata.topics]
    existing = [n for n in names if n in metadata.topics]
    if missing:
        futures = admin.create_topics(
            [NewTopic(n, num_partitions=partitions, replication_factor=rf, config=settings)
             for n in missing],
            request_timeout=timeout,
        )
        for name, future in futures.items():
            try:
                future.result(timeout)
                report.created.append(name)
            except KafkaException as exc:
                if "TOPIC_ALREADY_EXISTS" not in str(exc):
                    raise TopicsError(f"Kafka refused to create {name}: "
                                      f"{_kafka_text(exc)}") from exc
                existing.append(name)  # created concurrently by someone else: check it
    # Metadata lags creation by a moment; callers (and the drift check) need the topics
    # visible, so wait for that rather than hand back topics a producer cannot see yet.
    metadata = _wait_until_visible(admin, report.created + existing, timeout)
    if existing:
        for name in existing:
            if name not in metadata.topics:
                raise KafkaException(f"topic {name} exists but its metadata did not appear "
                                     f"within {timeout} s")
            found = _drift(admin, metadata.topics[name], partitions, rf, settings, timeout)
            report.drift.extend(found)
            if not found:
                report.unchanged.append(name)
    return report


def _check_settings(partitions: int, replication_factor: int | None, retention_ms: int,
                    max_message_bytes: int) -> None:
    """Settings Kafka would take but that make useless topics are refused up front."""
    if partitions < 1:
        raise TopicsError(f"partitions must be at least 1, got {partitions}")
    if replication_factor is not None and replication_factor < 1:
        raise TopicsError(f"replication factor must be at least 1, got {replication_factor}")
    if retention_ms < -1:
        raise TopicsError(f"retention.ms must be -1 (keep forever) or >= 0, got {retention_ms}")
    if max_message_bytes < MIN_MAX_MESSAGE_BYTES:
        raise TopicsError(f"max.message.bytes {max_message_bytes} would refuse ordinary "
                          f"events: use at least {MIN_MAX_MESSAGE_BYTES}")


def _kafka_text(exc: KafkaException) -> str:
    err = exc.args[0] if exc.args else exc
    return str(err.str()) if hasattr(err, "str") else str(err)


def _wait_until_visible(admin: AdminClient, names: list[str], timeout: float) -> ClusterMetadata:
    deadline = time.monotonic() + timeout
    while True:
        metadata = admin.list_topics(timeout=timeout)
        visible = {n for n in names if n in metadata.topics and metadata.topics[n].error is None
                   and metadata.topics[n].partitions}
        if len(visible) == len(set(names)) or time.monotonic() > deadline:
            return metadata
        time.sleep(0.2)


def _drift(admin: AdminClient, topic_md: TopicMetadata, partitions: int, rf: int,
           settings: dict[str, str], timeout: float) -> list[TopicDrift]:
    name = str(topic_md.topic)
    parts = topic_md.partitions
    drift: list[TopicDrift] = []
    if len(parts) != partitions:
        drift.append(TopicDrift(name, "partitions", str(partitions), str(len(parts))))
    actual_rf = len(next(iter(parts.values())).replicas) if parts else 0
    if actual_rf != rf:
        drift.append(TopicDrift(name, "replication factor", str(rf), str(actual_rf)))
    resource = ConfigResource(ResourceType.TOPIC, name)
    configs = admin.describe_configs([resource], request_timeout=timeout)[resource].result(timeout)
    for key, expected in settings.items():
        actual = configs[key].value if key in configs else None
        if actual != expected:
            drift.append(TopicDrift(name, key, expected, str(actual)))
    return drift

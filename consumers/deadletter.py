"""The dead-letter topic: records no builder can read, with why and where they came from.

A bad record must not stop a consumer, nor vanish: it is copied, key, value
and headers untouched, to `{prefix}.dlq` with the error and its source topic,
partition and offset added as headers, before the checkpoint that skips it
commits (so it is in the topic at least once).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from rlmesh_stream.schemas import headers as h
from rlmesh_stream.schemas.config import StreamConfig


@dataclass(slots=True)
class DeadLetter:
    topic: str
    partition: int
    offset: int
    error: str
    key: bytes | None = None
    value: bytes | None = None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)


class DeadLetterQueue:
    def __init__(self, config: StreamConfig, topic: str) -> None:
        self.config = config
        self.topic = topic
        self._producer: Producer | None = None

    def _producer_(self) -> Producer:
        if self._producer is None:
            self._ensure_topic()
            self._producer = Producer({**self.config.kafka_config(), "acks": "all",
                                       "enable.idempotence": True, "linger.ms": 5})
        return self._producer

    def _ensure_topic(self) -> None:
        admin = AdminClient(self.config.kafka_config())
        futures = admin.create_topics([NewTopic(self.topic, num_partitions=1)])
        for future in futures.values():
            try:
                future.result(timeout=30)
            except KafkaException as exc:
                if "TOPIC_ALREADY_EXISTS" not in str(exc) and "already exists" not in str(exc):
                    raise

    def send(self, letters: list[DeadLetter]) -> None:
        """Publish and wait until every letter is acknowledged."""
        producer = self._producer_()
        for d in letters:
            headers: list[tuple[str, str | bytes | None]] = [*d.headers,
                       (h.DLQ_ERROR, d.error.encode()),
                       (h.DLQ_TOPIC, d.topic.encode()),
                       (h.DLQ_PARTITION, str(d.partition).encode()),
                       (h.DLQ_OFFSET, str(d.offset).encode())]
            producer.produce(self.topic, key=d.key, value=d.value, headers=headers)
        remaining = producer.flush(60)
        if remaining:
            raise RuntimeError(f"{remaining} dead letters not acknowledged by Kafka")

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(30)

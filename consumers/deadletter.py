"""The dead-letter topic: records no builder can read, with why and where they came from.

A bad record must not stop a consumer, nor vanish: it is copied, key, value
and headers untouched, to `{prefix}.dlq` with the error and its source topic,
partition and offset added as headers, before the checkpoint that skips it
commits (so it is in the topic at least once).

The copy must fit wherever the original fitted: the producer and the topic accept the
event topics' `MAX_MESSAGE_BYTES` plus room for the added headers. A record the
dead-letter topic still refuses for good (a smaller limit set on an existing topic, a
policy) is not retried forever, which would stop the consumer on every restart:
`send` returns why, and the runtime records the reason in `dead_letters` and skips it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from rlmesh_stream.schemas.connection.config import StreamConfig
from rlmesh_stream.schemas.contract import headers as h
from rlmesh_stream.schemas.contract.topics import MAX_MESSAGE_BYTES, all_topics
from rlmesh_stream.schemas.errors import RlmeshStreamError

# A dead letter is its record plus the DLQ headers: room for them above the record's limit.
HEADER_ROOM_BYTES = 64 * 1024
MAX_ERROR_CHARS = 4096  # the error header is cut here, so the headers fit that room
MAX_DEAD_LETTER_BYTES = MAX_MESSAGE_BYTES + HEADER_ROOM_BYTES

# The answers that say "never": retrying the same record cannot succeed.
REFUSED_FOR_GOOD: frozenset[int] = frozenset({
    KafkaError.MSG_SIZE_TOO_LARGE,
    KafkaError.RECORD_LIST_TOO_LARGE,
    KafkaError.INVALID_RECORD,
    KafkaError.INVALID_MSG,
    KafkaError.INVALID_MSG_SIZE,
    KafkaError.POLICY_VIOLATION,
})

LetterId = tuple[str, int, int]  # (topic, partition, offset) of the source record


def check_dead_letter_topic(topic: str, prefix: str, read: list[str] | None = None) -> str:
    """`topic` if it can be the dead-letter topic of consumers reading `read` (default: the
    event topics under `prefix`); else ValueError. A topic the consumers read would hand them
    their own dead letters back, each dead-lettered again, for ever."""
    if topic in {*all_topics(prefix), *(read or ())}:
        raise ValueError(f"{topic!r} is an event topic the consumers read: dead letters "
                         "sent there would be read and dead-lettered again, for ever; "
                         "name a topic of its own")
    return topic


class DeadLetterQueueError(RlmeshStreamError, RuntimeError):
    """The dead-letter topic could not take letters now (Kafka down): retry, skip nothing."""


@dataclass(slots=True)
class DeadLetter:
    topic: str
    partition: int
    offset: int
    error: str
    key: bytes | None = None
    value: bytes | None = None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)

    @property
    def id(self) -> LetterId:
        return (self.topic, self.partition, self.offset)


class DeadLetterQueue:
    def __init__(self, config: StreamConfig, topic: str) -> None:
        self.config = config
        self.topic = topic
        self._producer: Producer | None = None

    def _producer_(self) -> Producer:
        if self._producer is None:
            self._ensure_topic()
            self._producer = Producer({**self.config.kafka_config(), "acks": "all",
                                       "enable.idempotence": True, "linger.ms": 5,
                                       "message.max.bytes": MAX_DEAD_LETTER_BYTES})
        return self._producer

    def _ensure_topic(self) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic  # at the first letter only

        admin = AdminClient(self.config.kafka_config())
        topic = NewTopic(self.topic, num_partitions=1,
                         config={"max.message.bytes": str(MAX_DEAD_LETTER_BYTES)})
        for future in admin.create_topics([topic]).values():
            try:
                future.result(timeout=30)
            except KafkaException as exc:
                if "TOPIC_ALREADY_EXISTS" not in str(exc) and "already exists" not in str(exc):
                    raise

    def send(self, letters: list[DeadLetter]) -> dict[LetterId, str]:
        """Publish and wait until every letter is acknowledged or refused for good.

        Returns the letters the topic refused for good, each with the reason; raises
        DeadLetterQueueError when some are neither (the caller retries, skipping nothing).
        """
        producer = self._producer_()
        refused: dict[LetterId, str] = {}
        failed: dict[LetterId, KafkaError] = {}

        def delivered(d: DeadLetter) -> Any:
            def report(err: KafkaError | None, _msg: Message) -> None:
                if err is not None:
                    failed[d.id] = err
            return report

        for d in letters:
            try:
                producer.produce(self.topic, key=d.key, value=d.value,
                                 headers=self._headers(d), on_delivery=delivered(d))
            except KafkaException as exc:
                err = exc.args[0] if exc.args else None
                if not isinstance(err, KafkaError) or err.code() not in REFUSED_FOR_GOOD:
                    raise
                failed[d.id] = err
        remaining = producer.flush(60)
        if remaining:
            raise DeadLetterQueueError(
                f"{remaining} dead letters not acknowledged by Kafka within 60 s")
        for letter_id, err in failed.items():
            if err.code() not in REFUSED_FOR_GOOD:
                raise DeadLetterQueueError(f"the dead-letter topic {self.topic} did not take "
                                           f"a letter: {err.str()} [{err.name()}]")
            refused[letter_id] = f"{err.str()} [{err.name()}]"
        return refused

    @staticmethod
    def _headers(d: DeadLetter) -> list[tuple[str, str | bytes | None]]:
        return [*d.headers,
                (h.DLQ_ERROR, d.error[:MAX_ERROR_CHARS].encode()),
                (h.DLQ_TOPIC, d.topic.encode()),
                (h.DLQ_PARTITION, str(d.partition).encode()),
                (h.DLQ_OFFSET, str(d.offset).encode())]

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(30)

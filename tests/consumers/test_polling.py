"""How the runtime takes records from librdkafka: what is fetched already, at once, a wait
only when nothing is (librdkafka's batch consume waits to fill the whole batch); then
each partition's records from where that partition is expected to go on."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic

from rlmesh_stream.consumers.builders import EpisodesBuilder
from rlmesh_stream.consumers.builders.delivery import DeliveryBuilder
from rlmesh_stream.consumers.runtime import ConsumerRuntime, RuntimeOptions, _existing_topics
from rlmesh_stream.consumers.sinks import open_sink
from rlmesh_stream.schemas.connection.config import StreamConfig
from rlmesh_stream.schemas.contract.topics import EventType


class _Queue:
    """librdkafka's consumer queue as consume() sees it: `fetched` records now, and
    `later` arriving while a call waits."""

    def __init__(self, fetched: list[Any], later: list[Any]) -> None:
        self.fetched, self.later = fetched, later
        self.timeouts: list[float] = []

    def consume(self, num_messages: int, timeout: float) -> list[Any]:
        self.timeouts.append(timeout)
        if not self.fetched and timeout > 0:
            self.fetched, self.later = self.later, []
        out, self.fetched = self.fetched[:num_messages], self.fetched[num_messages:]
        return out


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[ConsumerRuntime]:
    sink = open_sink(f"duckdb://{tmp_path / 'store.duckdb'}")  # nothing here reaches Kafka
    yield ConsumerRuntime(StreamConfig(), [EpisodesBuilder()], sink,
                          RuntimeOptions(group_id="g", poll_batch=3, poll_timeout=0.1))
    sink.close()


def _consume(rt: ConsumerRuntime, queue: _Queue) -> list[Any]:
    rt.consumer = queue  # type: ignore[assignment]
    return rt._consume()


def _records(*offsets: int) -> list[Any]:
    return [_Message("t", 0, o) for o in offsets]


def test_records_fetched_already_are_taken_without_waiting_for_a_full_batch(
        runtime: ConsumerRuntime) -> None:
    fetched = _records(0, 1)
    queue = _Queue(fetched=fetched, later=_records(2))
    assert _consume(runtime, queue) == fetched
    assert queue.timeouts == [0]


def test_with_nothing_fetched_the_runtime_waits_up_to_the_poll_timeout(
        runtime: ConsumerRuntime) -> None:
    later = _records(2)
    queue = _Queue(fetched=[], later=later)
    assert _consume(runtime, queue) == later
    assert queue.timeouts == [0, 0.1]


def test_a_poll_takes_at_most_poll_batch_records(runtime: ConsumerRuntime) -> None:
    fetched = _records(0, 1, 2, 3, 4)
    assert _consume(runtime, _Queue(fetched=fetched, later=[])) == fetched[:3]



class _Message:
    """A fetched record as confluent_kafka.Message shows it."""

    def __init__(self, topic: str, partition: int, offset: int) -> None:
        self._at = (topic, partition, offset)

    def error(self) -> None:
        return None

    def topic(self) -> str:
        return self._at[0]

    def partition(self) -> int:
        return self._at[1]

    def offset(self) -> int:
        return self._at[2]

    def timestamp(self) -> tuple[int, int]:
        return (1, 1_700_000_000_000)

    def value(self) -> bytes:
        return b""

    def headers(self) -> list[tuple[str, bytes]]:
        return []


def test_interleaved_runs_of_partitions_are_taken_from_where_each_one_is_expected(
        tmp_path: Path) -> None:
    """A revoked partition's records are dropped, and records below a partition's next
    expected offset (buffered already) are skipped, whichever run they come in."""
    sink = open_sink(f"duckdb://{tmp_path / 'store.duckdb'}")
    rt = ConsumerRuntime(StreamConfig(), [DeliveryBuilder()], sink, RuntimeOptions(group_id="g"))
    a, b = EventType.EPISODE_STARTED.topic(rt.config.topic_prefix), \
        EventType.EPISODE_COMPLETED.topic(rt.config.topic_prefix)
    rt.offsets.assigned = {(a, 0), (b, 0)}
    rt.offsets.next = {(a, 0): 1}
    messages = [_Message(a, 0, 0), _Message(a, 0, 1), _Message(b, 0, 7), _Message(b, 1, 3),
                _Message(a, 0, 2), _Message(b, 0, 8), _Message(a, 0, 2)]
    try:
        rt.reader.ingest(messages)  # type: ignore[arg-type]
        assert [(r.topic, r.partition, r.offset) for r in rt.policy.buffer] == [
            (a, 0, 1), (b, 0, 7), (a, 0, 2), (b, 0, 8)]
        assert rt.offsets.next == {(a, 0): 3, (b, 0): 9}
    finally:
        sink.close()


def test_the_topics_that_exist_are_asked_for_by_name_and_none_is_created(
        stream_config: StreamConfig) -> None:
    """Only the runtime's topics' metadata (not the whole cluster's); one that does not
    exist is not in the answer, and asking does not create it."""
    mine = EventType.EPISODE_STARTED.topic(stream_config.topic_prefix)
    missing = EventType.EPISODE_COMPLETED.topic(stream_config.topic_prefix)
    admin = AdminClient(stream_config.kafka_config())
    admin.create_topics([NewTopic(mine, num_partitions=2, replication_factor=1)])[mine].result(30)
    consumer = Consumer({**stream_config.kafka_config(), "group.id": "g"})
    try:
        found = _existing_topics(consumer, [mine, missing], timeout=10)
        assert list(found) == [mine]
        assert sorted(found[mine].partitions) == [0, 1]
        assert missing not in consumer.list_topics(timeout=10).topics
    finally:
        consumer.close()

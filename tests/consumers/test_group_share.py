"""Groups share the work: two members of a consume group, and of an export group, each
read a share of the largest topic, not one member the small topics and the other the
rest. The second member joins a group whose first member holds every partition (the
rebalance a member joining a running group makes); then the fleet is published and read
live, so what each reads is its assignment's share, not how long it was alone."""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from rlmesh_stream.consumers.builders import make_builders
from rlmesh_stream.consumers.runtime import CheckpointInfo, ConsumerRuntime, RuntimeOptions
from rlmesh_stream.consumers.sinks import open_sink
from rlmesh_stream.producer.hooks import KafkaRuntimeHooks
from rlmesh_stream.producer.simulator import simulate_fleet
from rlmesh_stream.schemas.connection.config import StreamConfig
from tests.consumers.consumer_helpers import create_topics
from tests.publishing import close_delivered

pytestmark = [pytest.mark.stack]

PARTITIONS = 12


class Member:
    """A group member run on a thread of this process, counting the records of each
    topic that its checkpoints applied (those of `builder`)."""

    def __init__(self, runtime: ConsumerRuntime, builder: str,
                 after: Callable[[], None] = lambda: None) -> None:
        self.runtime, self.builder, self.after = runtime, builder, after
        self.read: Counter[str] = Counter()
        self.errors: list[BaseException] = []
        runtime.checkpoints.on_checkpoint = self._count
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _count(self, info: CheckpointInfo) -> None:
        self.read.update(r.topic for r in info.records_by_builder.get(self.builder, []))

    def _run(self) -> None:
        try:
            self.runtime.run()
            self.after()
        except BaseException as exc:  # reported by the test thread
            self.errors.append(exc)

    def stop(self) -> None:
        self.runtime.stop()
        self.thread.join(timeout=120)
        assert not self.thread.is_alive(), "a member did not stop"
        assert self.errors == []


def _wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _join_one_after_the_other(start: Callable[[], Member]) -> list[Member]:
    """Two members: the second started once the first holds every partition."""
    first = start()
    _wait_for(lambda: len(first.runtime.assignment) == PARTITIONS * len(first.runtime.topics),
              90, "the first member to hold every partition")
    members = [first, start()]
    _wait_for(lambda: _both_hold_a_share(members), 90, "both members to hold partitions")
    return members


def _both_hold_a_share(members: list[Member]) -> bool:
    held = [set(m.runtime.assignment) for m in members]
    return all(held) and not held[0] & held[1]


def _ends(config: StreamConfig, topics: list[str]) -> dict[str, int]:
    """Records in each of `topics` (its partitions' high watermarks, from offset 0)."""
    consumer = Consumer({**config.kafka_config(), "group.id": uuid.uuid4().hex})
    try:
        return {t: sum(consumer.get_watermark_offsets(TopicPartition(t, p), timeout=15)[1]
                       for p in range(PARTITIONS)) for t in topics}
    finally:
        consumer.close()


def _publish_fleet(config: StreamConfig) -> None:
    hooks = KafkaRuntimeHooks(config=config, install_exit_handlers=False)
    simulate_fleet(hooks, sessions=48, lanes=4, episodes=6, seed=5, failure_rate=0.1,
                   next_step_fraction=1.0, window_every=50)
    close_delivered(hooks)


def _read_by_both(members: list[Member], config: StreamConfig) -> tuple[str, list[float]]:
    """Once every record of the members' topics is applied: the largest topic and each
    member's share of its records."""
    topics = members[0].runtime.topics
    ends = {t: n for t, n in _ends(config, topics).items() if n}
    _wait_for(lambda: all(sum(m.read[t] for m in members) >= n for t, n in ends.items()),
              240, "every record to be applied")
    largest = max(ends, key=lambda t: ends[t])
    return largest, [m.read[largest] / ends[largest] for m in members]


@pytest.mark.postgres
def test_two_members_of_a_consume_group_each_read_a_share_of_the_largest_topic(
        stream_config: StreamConfig, postgres_dsn: str) -> None:
    create_topics(stream_config, partitions=PARTITIONS)
    group = f"share-{uuid.uuid4().hex[:8]}"
    sinks: list[Any] = []

    def start() -> Member:
        sinks.append(open_sink(postgres_dsn))
        return Member(ConsumerRuntime(
            stream_config, make_builders(["episodes"]), sinks[-1],
            RuntimeOptions(group_id=group, from_beginning=True, checkpoint_interval=0.2)),
            "episodes")

    try:
        largest, shares = _shares_of_two_members(start, stream_config)
    finally:
        for sink in sinks:
            sink.close()

    assert largest.endswith((".episode_started", ".episode_completed"))
    assert all(0.3 <= share <= 0.7 for share in shares), (largest, shares)


def _shares_of_two_members(start: Callable[[], Member],
                           config: StreamConfig) -> tuple[str, list[float]]:
    """Two members joined one after the other read a fleet published after both joined:
    the largest topic and each member's share of its records."""
    members = _join_one_after_the_other(start)
    try:
        _publish_fleet(config)
        return _read_by_both(members, config)
    finally:
        for member in members:
            member.stop()

def test_two_members_of_an_export_group_each_read_a_share_of_the_largest_topic(
        stream_config: StreamConfig, tmp_path: Path) -> None:
    pytest.importorskip("pyiceberg")
    from rlmesh_stream.consumers.datasets.episodes import Filters
    from rlmesh_stream.consumers.datasets.export import ExportOptions, make_export
    from rlmesh_stream.consumers.datasets.iceberg import IcebergTarget

    create_topics(stream_config, partitions=PARTITIONS)
    group = f"share-{uuid.uuid4().hex[:8]}"
    target = IcebergTarget(f"sqlite:///{tmp_path / 'catalog.db'}", "rl.fleet")

    def start() -> Member:
        sink, runtime = make_export(
            stream_config, ExportOptions(None, "iceberg", "rl.fleet", Filters(),
                                         iceberg=target, group=group),
            RuntimeOptions(group_id=group, from_beginning=True, checkpoint_interval=0.2))
        return Member(runtime, "certificate", after=_finished(sink))

    largest, shares = _shares_of_two_members(start, stream_config)

    assert all(0.3 <= share <= 0.7 for share in shares), (largest, shares)


def _finished(sink: Any) -> Callable[[], None]:
    def finish() -> None:
        try:
            sink.finish()
        finally:
            sink.close()
    return finish

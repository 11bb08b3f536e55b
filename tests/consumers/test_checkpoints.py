"""When the runtime checkpoints: on a backlog, no more often than four times the last
checkpoint's cost; reading live, every `checkpoint_interval`; always at `max_batch`. And
when a cut is reduced: while the checkpoint before it is written, unless the sink reads
what its builders feed it."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import ClassVar

import pytest
from confluent_kafka import Consumer

from rlmesh_stream.consumers.builders import EpisodesBuilder
from rlmesh_stream.consumers.builders.base import Builder, PartialRow
from rlmesh_stream.consumers.datasets.export import DatasetSink
from rlmesh_stream.consumers.records import Record
from rlmesh_stream.consumers.runtime import ConsumerRuntime, RuntimeOptions
from rlmesh_stream.consumers.sinks import SinkBatch, open_sink
from rlmesh_stream.consumers.tables import Table
from rlmesh_stream.schemas.config import StreamConfig
from rlmesh_stream.schemas.topics import EventType


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[ConsumerRuntime]:
    sink = open_sink(f"duckdb://{tmp_path / 'store.duckdb'}")  # nothing here reaches Kafka
    rt = ConsumerRuntime(StreamConfig(), [EpisodesBuilder()], sink,
                         RuntimeOptions(group_id="g", checkpoint_interval=1.0, max_batch=10))
    yield rt
    sink.close()


def _buffer(rt: ConsumerRuntime, records: int, last_checkpoint_ago: float,
            last_checkpoint_cost: float, behind: bool) -> None:
    rt._buffer = [Record("t", 0, i, datetime(2026, 1, 1, tzinfo=UTC),
                         EventType.EPISODE_STARTED, None) for i in range(records)]
    rt._last_flush = time.monotonic() - last_checkpoint_ago
    rt._flush_cost = last_checkpoint_cost
    rt._behind = behind


def test_a_backlog_spaces_checkpoints_to_four_times_the_last_ones_cost(
        runtime: ConsumerRuntime) -> None:
    _buffer(runtime, 3, last_checkpoint_ago=1.5, last_checkpoint_cost=0.5, behind=True)
    assert not runtime._checkpoint_due()  # 1.5 s < 4 x 0.5 s
    _buffer(runtime, 3, last_checkpoint_ago=2.1, last_checkpoint_cost=0.5, behind=True)
    assert runtime._checkpoint_due()


def test_reading_live_checkpoints_every_interval_whatever_the_last_cost(
        runtime: ConsumerRuntime) -> None:
    _buffer(runtime, 3, last_checkpoint_ago=1.1, last_checkpoint_cost=0.5, behind=False)
    assert runtime._checkpoint_due()


def test_max_batch_records_checkpoint_at_once_even_on_a_backlog(
        runtime: ConsumerRuntime) -> None:
    _buffer(runtime, 10, last_checkpoint_ago=0.0, last_checkpoint_cost=5.0, behind=True)
    assert runtime._checkpoint_due()


class _Watch(Builder):
    """Records, for each record it reduces, whether the sink is writing a checkpoint."""

    name = "watch"
    event_types: ClassVar[frozenset[EventType]] = frozenset({EventType.EPISODE_STARTED})
    tables: ClassVar[tuple[Table, ...]] = ()

    def __init__(self, writing: threading.Event, release: threading.Event) -> None:
        self.writing, self.release = writing, release
        self.seen_writing: list[bool] = []

    def rows(self, record: Record) -> Iterator[PartialRow]:
        self.seen_writing.append(self.writing.is_set())
        self.release.set()  # the checkpoint in flight may finish now
        return iter(())


def _two_cuts(tmp_path: Path, reads_builder_state: bool) -> list[bool]:
    """Cut two checkpoints while the first one's transaction is held open until the second
    cut is reduced (or 2 s pass); what the builder saw of the first one's writing."""
    sink = open_sink(f"duckdb://{tmp_path / 'store.duckdb'}")
    writing, release = threading.Event(), threading.Event()
    apply = sink.apply

    def held_apply(batch: SinkBatch) -> None:
        writing.set()
        release.wait(2)
        apply(batch)
        writing.clear()

    sink.apply = held_apply  # type: ignore[method-assign]
    sink.reads_builder_state = reads_builder_state  # type: ignore[misc]
    watch = _Watch(writing, release)
    rt = ConsumerRuntime(StreamConfig(), [watch], sink, RuntimeOptions(group_id="g"))
    rt.consumer = Consumer({"bootstrap.servers": "127.0.0.1:1", "group.id": "g"})  # unused
    topic = EventType.EPISODE_STARTED.topic(rt.config.topic_prefix)
    stamp = datetime(2026, 1, 1, tzinfo=UTC)
    try:
        for first in (0, 5):
            rt._buffer = [Record(topic, 0, first + i, stamp, EventType.EPISODE_STARTED, None)
                          for i in range(5)]
            release.clear()
            rt._flush()
            assert writing.wait(2)  # the checkpoint is being written
        rt._flush(final=True)
        assert sink.load_offsets("watch") == {(topic, 0): 10}
        return watch.seen_writing[5:]
    finally:
        rt.consumer.close()
        sink.close()


def test_a_cut_is_reduced_while_the_checkpoint_before_it_is_written(tmp_path: Path) -> None:
    assert _two_cuts(tmp_path, reads_builder_state=False) == [True] * 5


def test_a_sink_that_reads_builder_state_sees_a_cut_reduced_only_after_the_one_before(
        tmp_path: Path) -> None:
    assert _two_cuts(tmp_path, reads_builder_state=True) == [False] * 5


def test_the_dataset_exporter_reads_its_builders_state() -> None:
    assert DatasetSink.reads_builder_state

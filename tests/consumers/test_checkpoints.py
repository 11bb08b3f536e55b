"""When the runtime checkpoints: on a backlog, no more often than four times the last
checkpoint's cost; reading live, every `checkpoint_interval`, and at the head of the stream as
soon as the last checkpoint's cost has passed; always at `max_batch`. And
when a cut is reduced: while the checkpoint before it is written, unless the sink reads
what its builders feed it. What a backlog's cut takes while the sink is the slower side:
each partition's records up to the frontier of the partitions that lag (aligned_cut.py);
everything otherwise."""

from __future__ import annotations

import contextlib
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
from rlmesh_stream.consumers.deadletter import DeadLetter
from rlmesh_stream.consumers.runtime import ConsumerRuntime, RuntimeOptions, _offset_ranges
from rlmesh_stream.consumers.runtime.records import Record
from rlmesh_stream.consumers.sinks import SinkBatch, open_sink
from rlmesh_stream.consumers.table_model import Table
from rlmesh_stream.schemas.connection.config import StreamConfig
from rlmesh_stream.schemas.contract.topics import EventType


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[ConsumerRuntime]:
    sink = open_sink(f"duckdb://{tmp_path / 'store.duckdb'}")  # nothing here reaches Kafka
    rt = ConsumerRuntime(StreamConfig(), [EpisodesBuilder()], sink,
                         RuntimeOptions(group_id="g", checkpoint_interval=1.0, max_batch=10))
    yield rt
    sink.close()


def _buffer(rt: ConsumerRuntime, records: int, last_checkpoint_ago: float,
            last_checkpoint_cost: float, behind: bool) -> None:
    rt.policy.buffer = [Record("t", 0, i, datetime(2026, 1, 1, tzinfo=UTC),
                         EventType.EPISODE_STARTED, None) for i in range(records)]
    rt.policy.last_cut = time.monotonic() - last_checkpoint_ago
    rt.policy.cost = last_checkpoint_cost
    rt.policy.behind = behind


def test_a_backlog_spaces_checkpoints_to_four_times_the_last_ones_cost(
        runtime: ConsumerRuntime) -> None:
    _buffer(runtime, 3, last_checkpoint_ago=1.5, last_checkpoint_cost=0.5, behind=True)
    assert not runtime.policy.due()  # 1.5 s < 4 x 0.5 s
    _buffer(runtime, 3, last_checkpoint_ago=2.1, last_checkpoint_cost=0.5, behind=True)
    assert runtime.policy.due()


def test_reading_live_checkpoints_every_interval_whatever_the_last_cost(
        runtime: ConsumerRuntime) -> None:
    _buffer(runtime, 3, last_checkpoint_ago=1.1, last_checkpoint_cost=0.5, behind=False)
    assert runtime.policy.due()


def test_max_batch_records_checkpoint_at_once_even_on_a_backlog(
        runtime: ConsumerRuntime) -> None:
    _buffer(runtime, 10, last_checkpoint_ago=0.0, last_checkpoint_cost=5.0, behind=True)
    assert runtime.policy.due()


@contextlib.contextmanager
def _writer_busy(rt: ConsumerRuntime) -> Iterator[None]:
    """A checkpoint in flight until the block ends."""
    release = threading.Event()
    rt.policy.writer._write = lambda batch, context: release.wait(5)  # type: ignore[method-assign,assignment,return-value]
    rt.policy.writer.submit(SinkBatch(group_id="g"), None)
    try:
        assert rt.policy.writer.busy
        yield
    finally:
        release.set()
        rt.policy.writer.close()


def _offline(rt: ConsumerRuntime, read_to: int, end: int) -> None:
    rt.options.until_end = True  # max_batch 10, as the fixture's
    rt.offsets.assigned = {("t", 0)}
    rt.offsets.next, rt.offsets.ends = {("t", 0): read_to}, {("t", 0): end}


def test_an_offline_run_read_to_its_end_cuts_its_last_checkpoint_while_one_is_written(
        runtime: ConsumerRuntime) -> None:
    """Nothing is left to read meanwhile: waiting for the writer before cutting only idles."""
    _offline(runtime, read_to=3, end=3)
    _buffer(runtime, 3, last_checkpoint_ago=0.0, last_checkpoint_cost=5.0, behind=True)
    with _writer_busy(runtime):
        assert runtime.policy.due()


def test_an_offline_run_not_at_its_end_reads_on_while_a_checkpoint_is_written(
        runtime: ConsumerRuntime) -> None:
    _offline(runtime, read_to=3, end=8)
    _buffer(runtime, 3, last_checkpoint_ago=9.0, last_checkpoint_cost=0.0, behind=False)
    with _writer_busy(runtime):
        assert not runtime.policy.due()


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
            rt.policy.buffer = [Record(topic, 0, first + i, stamp, EventType.EPISODE_STARTED, None)
                          for i in range(5)]
            release.clear()
            rt.checkpoints.flush()
            assert writing.wait(2)  # the checkpoint is being written
        rt.checkpoints.flush(final=True)
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


def test_a_cut_moves_each_partition_from_its_first_record_to_after_its_last() -> None:
    stamp = datetime(2026, 1, 1, tzinfo=UTC)
    runs = [("a", 0, 4), ("a", 0, 5), ("b", 0, 9), ("a", 1, 0), ("a", 0, 6), ("b", 0, 10)]
    cut: list[Record | DeadLetter] = [
        Record(t, p, o, stamp, EventType.EPISODE_STARTED, None) for t, p, o in runs]
    assert _offset_ranges(cut) == ({("a", 0): 4, ("b", 0): 9, ("a", 1): 0},
                                   {("a", 0): 7, ("b", 0): 11, ("a", 1): 1})


@pytest.fixture
def backlog(runtime: ConsumerRuntime) -> Iterator[ConsumerRuntime]:
    """An offline run behind on two partitions, of two topics, both with more to read:
    `started` read ahead of `completed`, as librdkafka does with a topic of smaller
    records (an unconnected consumer: the ends seen at assignment give the lags)."""
    runtime.options.until_end = True  # max_batch 10, as the fixture's
    runtime.consumer = Consumer({"bootstrap.servers": "127.0.0.1:1", "group.id": "g"})
    runtime.offsets.assigned = {("started", 0), ("completed", 0)}
    runtime.offsets.next = {("started", 0): 6, ("completed", 0): 3}
    runtime.offsets.ends = {("started", 0): 50, ("completed", 0): 50}
    runtime.policy.buffer = [_stamped("started", 0, ms=0), _stamped("started", 1, ms=1),
                       _stamped("completed", 0, ms=0), _stamped("started", 2, ms=2),
                       _stamped("completed", 1, ms=1), _stamped("started", 3, ms=3),
                       _stamped("completed", 2, ms=2), _stamped("started", 4, ms=4),
                       _stamped("started", 5, ms=5)]
    runtime.policy.behind = True
    yield runtime
    runtime.consumer.close()


def _stamped(topic: str, offset: int, ms: int) -> Record:
    stamp = datetime.fromtimestamp(1_800_000_000 + ms / 1000, tz=UTC)
    return Record(topic, 0, offset, stamp, EventType.EPISODE_STARTED, None)


def _offsets(items: list[Record | DeadLetter]) -> list[tuple[str, int]]:
    return [(r.topic, r.offset) for r in items]


def test_a_backlogs_checkpoint_leaves_what_was_read_past_the_lagging_frontier(
        backlog: ConsumerRuntime) -> None:
    with _writer_busy(backlog):  # the sink is the slower side
        cut = backlog.policy.cut(align=True)
    # `completed` was read up to 2 ms: `started` records after it wait for their partners
    assert _offsets(cut) == [("started", 0), ("started", 1), ("completed", 0),
                             ("started", 2), ("completed", 1), ("completed", 2)]
    assert _offsets(backlog.policy.buffer) == [("started", 3), ("started", 4), ("started", 5)]


def test_records_left_for_the_next_checkpoint_do_not_count_towards_max_batch(
        backlog: ConsumerRuntime) -> None:
    with _writer_busy(backlog):
        backlog.policy.cut(align=True)
    backlog.policy.buffer += [_stamped("started", 6 + i, ms=6 + i) for i in range(9)]
    assert not backlog.policy.due()  # 9 read since the cut (+3 left): max_batch is 10
    backlog.policy.buffer.append(_stamped("started", 15, ms=15))
    assert backlog.policy.due()


def test_a_backlogs_checkpoint_takes_everything_while_the_sink_keeps_up(
        backlog: ConsumerRuntime) -> None:
    """The writer is idle: the reading is the slower side, and aligning would slow it."""
    assert len(backlog.policy.cut(align=True)) == 9 and backlog.policy.buffer == []


def test_a_checkpoint_read_to_the_end_takes_everything(backlog: ConsumerRuntime) -> None:
    backlog.offsets.ends = {("started", 0): 6, ("completed", 0): 3}
    with _writer_busy(backlog):
        assert len(backlog.policy.cut(align=True)) == 9 and backlog.policy.buffer == []


def test_a_checkpoint_read_live_takes_everything(backlog: ConsumerRuntime) -> None:
    backlog.policy.behind = False  # the last consume() was not a full batch: caught up
    with _writer_busy(backlog):
        assert len(backlog.policy.cut(align=True)) == 9 and backlog.policy.buffer == []


def test_a_checkpoint_cut_without_aligning_takes_everything(
        backlog: ConsumerRuntime) -> None:
    """The last one, one before a revoke, one after a registry outage."""
    with _writer_busy(backlog):
        assert len(backlog.policy.cut(align=False)) == 9 and backlog.policy.buffer == []


def test_an_offline_run_near_its_end_cuts_as_soon_as_the_writer_is_free(
        runtime: ConsumerRuntime) -> None:
    """The last transaction is written after the last record is read: keep it small."""
    _offline(runtime, read_to=3, end=12)  # 9 left, under max_batch (10)
    _buffer(runtime, 2, last_checkpoint_ago=0.0, last_checkpoint_cost=5.0, behind=True)
    assert runtime.policy.due()  # 2 read: a fifth of max_batch


def test_an_offline_run_near_its_end_reads_on_while_a_checkpoint_is_written(
        runtime: ConsumerRuntime) -> None:
    _offline(runtime, read_to=3, end=12)
    _buffer(runtime, 2, last_checkpoint_ago=0.0, last_checkpoint_cost=5.0, behind=True)
    with _writer_busy(runtime):
        assert not runtime.policy.due()


def test_an_offline_run_far_from_its_end_waits_for_max_batch_or_the_interval(
        runtime: ConsumerRuntime) -> None:
    _offline(runtime, read_to=3, end=13)  # 10 left: max_batch
    _buffer(runtime, 2, last_checkpoint_ago=0.0, last_checkpoint_cost=5.0, behind=True)
    assert not runtime.policy.due()


def _caught_up(rt: ConsumerRuntime, records: int, last_checkpoint_ago: float,
               last_checkpoint_cost: float) -> None:
    _buffer(rt, records, last_checkpoint_ago, last_checkpoint_cost, behind=False)
    rt.policy.caught_up = True  # the last read found nothing fetched and waited


def test_reading_live_at_the_head_checkpoints_once_the_last_ones_cost_has_passed(
        runtime: ConsumerRuntime) -> None:
    _caught_up(runtime, 3, last_checkpoint_ago=0.05, last_checkpoint_cost=0.04)
    assert runtime.policy.due()  # 50 ms > 40 ms, well under the 1 s interval
    _caught_up(runtime, 3, last_checkpoint_ago=0.03, last_checkpoint_cost=0.04)
    assert not runtime.policy.due()


def test_reading_live_at_the_head_waits_for_the_checkpoint_in_flight(
        runtime: ConsumerRuntime) -> None:
    _caught_up(runtime, 3, last_checkpoint_ago=0.5, last_checkpoint_cost=0.0)
    with _writer_busy(runtime):
        assert not runtime.policy.due()


def test_reading_live_at_the_head_never_waits_longer_than_the_interval(
        runtime: ConsumerRuntime) -> None:
    _caught_up(runtime, 3, last_checkpoint_ago=1.1, last_checkpoint_cost=5.0)
    assert runtime.policy.due()  # 5 s would be longer: the interval bounds it
    _caught_up(runtime, 3, last_checkpoint_ago=0.9, last_checkpoint_cost=5.0)
    assert not runtime.policy.due()


def test_an_offline_run_at_the_head_of_what_is_fetched_keeps_the_interval(
        runtime: ConsumerRuntime) -> None:
    _offline(runtime, read_to=3, end=13)
    _caught_up(runtime, 3, last_checkpoint_ago=0.5, last_checkpoint_cost=0.0)
    assert not runtime.policy.due()


def test_reading_live_at_the_head_keeps_the_interval_when_told_to(
        runtime: ConsumerRuntime) -> None:
    runtime.options.eager_at_head = False  # fewer transactions, as RuntimeOptions allows
    _caught_up(runtime, 3, last_checkpoint_ago=0.5, last_checkpoint_cost=0.0)
    assert not runtime.policy.due()


# -- ends of partition past the last record (a transactional producer's markers) ---------

@pytest.fixture
def marked(tmp_path: Path) -> Iterator[tuple[ConsumerRuntime, tuple[str, int]]]:
    """A runtime that stored offset 0 of a partition, then read records 0..8 of it and
    an end of partition at 10 (a commit marker at 9): no Kafka is reached."""
    sink = open_sink(f"duckdb://{tmp_path / 'store.duckdb'}")
    rt = ConsumerRuntime(StreamConfig(), [EpisodesBuilder()], sink,
                         RuntimeOptions(group_id="g", checkpoint_interval=60.0, max_batch=1000))
    rt.checkpoints.commit = lambda progress, final: None  # no group to mirror offsets into
    key = (EventType.EPISODE_STARTED.topic(rt.config.topic_prefix), 0)
    offsets = rt.offsets
    offsets.assigned, offsets.starts, offsets.next = {key}, {key: 0}, {key: 0}
    offsets.load(sink)
    rt.checkpoints.flush(wait=True)  # stores 0, where reading started
    stamp = datetime(2026, 1, 1, tzinfo=UTC)
    rt.policy.buffer = [Record(key[0], 0, i, stamp, EventType.EPISODE_STARTED, None)
                        for i in range(9)]
    offsets.next[key] = 9
    offsets.reached_end(key, 10)
    yield rt, key
    sink.close()


def test_an_end_past_the_last_record_is_stored_with_the_records_before_it(
        marked: tuple[ConsumerRuntime, tuple[str, int]]) -> None:
    rt, key = marked

    rt.checkpoints.flush(wait=True)

    assert rt.sink.load_offsets("episodes") == {key: 10}


def test_an_end_is_not_stored_while_a_record_before_it_is_held_back(
        marked: tuple[ConsumerRuntime, tuple[str, int]]) -> None:
    rt, key = marked
    cut = rt.policy.cut

    def all_but_the_last(align: bool) -> list[Record | DeadLetter]:
        """An aligned cut: the last record is left for the next checkpoint."""
        buffer = rt.policy.buffer
        rt.policy.buffer = buffer[-1:]
        return buffer[:-1]

    rt.policy.cut = all_but_the_last  # type: ignore[method-assign]
    rt.checkpoints.flush(wait=True)
    assert rt.sink.load_offsets("episodes") == {key: 8}

    rt.policy.cut = cut  # type: ignore[method-assign]
    rt.checkpoints.flush(wait=True)

    assert rt.sink.load_offsets("episodes") == {key: 10}


def test_an_end_noted_before_a_dropped_checkpoint_is_never_stored(
        marked: tuple[ConsumerRuntime, tuple[str, int]]) -> None:
    """The drop makes the run read again from 0: storing 10 in the checkpoint cut next,
    before the rewind, passed records 0..8, never applied (a reviewer's find)."""
    from rlmesh_stream.consumers.sinks import OffsetConflict

    rt, key = marked
    apply, calls = rt.sink.apply, []

    def dropped_once(batch: SinkBatch) -> None:
        calls.append(batch)
        if len(calls) == 1:
            raise OffsetConflict("another process moved one of these partitions")
        apply(batch)

    rt.sink.apply = dropped_once  # type: ignore[method-assign]
    rt.checkpoints.flush(wait=True)  # records 0..8 and the end: dropped
    assert rt.checkpoints.rewind and not rt.policy.buffer

    if rt.checkpoints.positions_pending():  # the reading loop's next lines
        rt.checkpoints.flush(wait=True)

    assert rt.sink.load_offsets("episodes") == {key: 0}


def test_a_live_end_waits_for_the_checkpoint_interval(
        marked: tuple[ConsumerRuntime, tuple[str, int]]) -> None:
    """Not an offsets-only transaction at each commit of a transactional producer."""
    rt, _ = marked
    rt.checkpoints.flush(wait=True)
    rt.offsets.reached_end(next(iter(rt.offsets.assigned)), 12)

    assert not rt.checkpoints.positions_pending()
    rt.policy.last_cut -= 60.0
    assert rt.checkpoints.positions_pending()


def test_a_stop_while_a_rewind_is_pending_accounts_for_the_checkpoint_in_flight(
        marked: tuple[ConsumerRuntime, tuple[str, int]]) -> None:
    """A registry outage cuts what was read before it, then rewinds; a stop meanwhile
    still waits for that checkpoint and counts it (a reviewer's find)."""
    rt, key = marked
    release = threading.Event()
    apply = rt.sink.apply

    def held(batch: SinkBatch) -> None:
        release.wait(5)
        apply(batch)

    rt.sink.apply = held  # type: ignore[method-assign]
    rt.checkpoints.flush()  # in flight
    rt.checkpoints.rewind = True
    threading.Timer(0.2, release.set).start()

    rt.checkpoints.flush(final=True)

    assert (rt.events, rt.sink.load_offsets("episodes")) == (9, {key: 10})


@pytest.fixture
def unstored(tmp_path: Path) -> Iterator[tuple[ConsumerRuntime, tuple[str, int], list[SinkBatch]]]:
    """A live run's first: a partition with no stored offset, read from 4 to 6, whose
    first checkpoint the sink drops (another process moved one of its partitions); the
    batches the sink was handed."""
    from rlmesh_stream.consumers.sinks import OffsetConflict

    sink = open_sink(f"duckdb://{tmp_path / 'store.duckdb'}")
    rt = ConsumerRuntime(StreamConfig(), [EpisodesBuilder()], sink,
                         RuntimeOptions(group_id="g", checkpoint_interval=60.0))
    rt.checkpoints.commit = lambda progress, final: None  # no group to mirror offsets into
    key = (EventType.EPISODE_STARTED.topic(rt.config.topic_prefix), 0)
    offsets = rt.offsets
    offsets.assigned, offsets.starts, offsets.next = {key}, {key: 4}, {key: 4}
    offsets.load(sink)
    stamp = datetime(2026, 1, 1, tzinfo=UTC)
    rt.policy.buffer = [Record(key[0], 0, i, stamp, EventType.EPISODE_STARTED, None)
                        for i in range(4, 7)]
    apply, calls = sink.apply, []

    def dropped_once(batch: SinkBatch) -> None:
        calls.append(batch)
        if len(calls) == 1:
            raise OffsetConflict("another process moved one of these partitions")
        apply(batch)

    sink.apply = dropped_once  # type: ignore[method-assign]
    yield rt, key, calls
    sink.close()


def test_a_stop_after_a_dropped_checkpoint_still_stores_where_reading_started(
        unstored: tuple[ConsumerRuntime, tuple[str, int], list[SinkBatch]]) -> None:
    """The dropped checkpoint held the partition's start, and a stop before the rewind
    stored nothing: the group's next live run started it at its end then, and never read
    what landed in between."""
    rt, key, _ = unstored
    rt.checkpoints.flush(wait=True)  # records 4..6 and the start: dropped
    assert rt.checkpoints.rewind

    rt.checkpoints.flush(final=True)  # the stop, before the rewind

    assert rt.sink.load_offsets("episodes") == {key: 4}


def test_a_stop_while_the_checkpoint_it_waits_for_is_dropped_stores_where_reading_started(
        unstored: tuple[ConsumerRuntime, tuple[str, int], list[SinkBatch]]) -> None:
    """Reading live at the head: the buffer is empty when the stop comes, and the
    checkpoint in flight is the one dropped (a reviewer's find)."""
    rt, key, _ = unstored
    rt.checkpoints.flush()  # in flight, not waited for; the buffer is empty now

    rt.checkpoints.flush(final=True)

    assert rt.checkpoints.rewind
    assert rt.sink.load_offsets("episodes") == {key: 4}


def test_a_stop_whose_store_of_the_starts_fails_still_ends_cleanly(
        unstored: tuple[ConsumerRuntime, tuple[str, int], list[SinkBatch]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Storing the starts is best effort: before it, a stop with a rewind pending never
    raised (a reviewer's find)."""
    rt, _, _ = unstored
    rt.checkpoints.flush(wait=True)  # dropped

    def refused(batch: SinkBatch) -> None:
        raise ValueError("the sink refuses")

    monkeypatch.setattr(rt.sink, "apply", refused)

    rt.checkpoints.flush(final=True)

    assert rt.sink.load_offsets("episodes") == {}

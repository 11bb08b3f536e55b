"""The aligned cut: while a backlog is read, a checkpoint takes of each partition its
records up to the frontier of the partitions that lag, and leaves the rest, in order,
for the next one; each partition's share is a prefix of what was read from it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from rlmesh_stream.consumers.deadletter import DeadLetter
from rlmesh_stream.consumers.runtime.aligned_cut import frontier, newest_stamps, split
from rlmesh_stream.consumers.runtime.records import Record
from rlmesh_stream.schemas.contract.topics import EventType

T0 = datetime(2026, 12, 4, tzinfo=UTC)
Item = Record | DeadLetter


def _at(ms: int) -> datetime:
    return T0 + timedelta(milliseconds=ms)


def _record(topic: str, partition: int, offset: int, ms: int) -> Record:
    return Record(topic, partition, offset, _at(ms), EventType.EPISODE_STARTED, None)


@st.composite
def buffers(draw: st.DrawFn) -> list[Item]:
    """Runs of records from a few partitions, each partition in offset order, stamps that
    mostly rise (a producer's clock) and sometimes step back; some dead letters."""
    buffer: list[Item] = []
    offsets: dict[tuple[str, int], int] = {}
    clock: dict[tuple[str, int], int] = {}
    for _ in range(draw(st.integers(0, 12))):
        tp = (draw(st.sampled_from(["started", "completed"])), draw(st.integers(0, 2)))
        for _ in range(draw(st.integers(1, 6))):
            offset = offsets.get(tp, 0)
            offsets[tp] = offset + 1
            clock[tp] = clock.get(tp, 0) + draw(st.integers(-3, 10))
            if draw(st.integers(0, 9)) == 0:
                buffer.append(DeadLetter(*tp, offset, "DecodeError: bad"))
            else:
                buffer.append(_record(*tp, offset, clock[tp]))
    return buffer


def _by_partition(items: list[Item]) -> dict[tuple[str, int], list[int]]:
    out: dict[tuple[str, int], list[int]] = {}
    for item in items:
        out.setdefault((item.topic, item.partition), []).append(item.offset)
    return out


@given(buffers(), st.integers(-5, 60))
def test_each_partition_is_cut_at_a_prefix_and_keeps_the_rest_in_order(
        buffer: list[Item], until_ms: int) -> None:
    cut, held = split(buffer, _at(until_ms), limit=10_000)
    whole, taken, kept = _by_partition(buffer), _by_partition(cut), _by_partition(held)
    for tp, offsets in whole.items():
        assert taken.get(tp, []) + kept.get(tp, []) == offsets


@given(buffers(), st.integers(-5, 60))
def test_a_partition_is_held_from_its_first_record_stamped_after_the_frontier(
        buffer: list[Item], until_ms: int) -> None:
    until = _at(until_ms)
    cut, held = split(buffer, until, limit=10_000)
    if cut is buffer:
        return  # nothing was held back (nothing stamped after, or nothing left to cut)
    assert all(r.timestamp <= until for r in cut if type(r) is Record)
    firsts: dict[tuple[str, int], Item] = {}
    for item in held:
        firsts.setdefault((item.topic, item.partition), item)
    assert all(type(r) is Record and r.timestamp > until for r in firsts.values())


def test_records_stamped_up_to_the_frontier_are_cut_and_the_later_ones_held() -> None:
    buffer: list[Item] = [_record("started", 0, 0, 1), _record("started", 0, 1, 5),
                          _record("completed", 0, 0, 2), _record("started", 0, 2, 3)]
    cut, held = split(buffer, _at(2), limit=10)
    assert [(r.topic, r.offset) for r in cut] == [("started", 0), ("completed", 0)]
    # offset 2 is stamped before the frontier, yet follows a held record: held too
    assert [(r.topic, r.offset) for r in held] == [("started", 1), ("started", 2)]


def test_the_whole_buffer_is_cut_when_more_than_the_limit_would_stay() -> None:
    buffer: list[Item] = [_record("started", 0, i, i) for i in range(5)]
    cut, held = split(buffer, _at(1), limit=2)  # three would stay
    assert cut == buffer and held == []


def test_the_whole_buffer_is_cut_when_nothing_would_be() -> None:
    buffer: list[Item] = [_record("started", 0, i, 10 + i) for i in range(3)]
    cut, held = split(buffer, _at(1), limit=10)
    assert cut == buffer and held == []


def test_a_dead_letter_after_a_held_record_of_its_partition_is_held() -> None:
    buffer: list[Item] = [_record("started", 0, 0, 1), _record("started", 0, 1, 9),
                          DeadLetter("started", 0, 2, "DecodeError: bad")]
    cut, held = split(buffer, _at(5), limit=10)
    assert [i.offset for i in cut] == [0] and [i.offset for i in held] == [1, 2]


def test_the_newest_stamp_of_a_partition_is_its_last_records_past_a_dead_letter() -> None:
    buffer: list[Item] = [_record("started", 0, 0, 7), _record("completed", 1, 0, 3),
                          _record("started", 0, 1, 4), DeadLetter("started", 0, 2, "bad")]
    assert newest_stamps(buffer) == {("started", 0): _at(4), ("completed", 1): _at(3)}


def test_the_frontier_is_the_oldest_newest_stamp_of_the_partitions_that_lag() -> None:
    newest = {("started", 0): _at(9), ("completed", 0): _at(4), ("started", 1): _at(2)}
    assert frontier(newest, [("started", 0), ("completed", 0)]) == _at(4)


def test_no_frontier_when_no_lagging_partition_has_buffered_records() -> None:
    assert frontier({("started", 0): _at(9)}, [("completed", 0)]) is None

"""PostgreSQL: the keys an episodes checkpoint locks (`SinkBatch.locks`): the buckets of its
sessions (`builders.base.LOCK_BUCKETS`). Two writers touching one session wait for each
other whatever partitions its records came from; writers of sessions of disjoint partition
ranges (two members of one group) do not; a backlog's checkpoint of thousands of sessions
takes no more locks than PostgreSQL's lock table holds (max_locks_per_transaction x
max_connections, 6 400 by default, which a checkpoint of 15 000 session locks ran out of)."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from rlmesh_stream.consumers.builders import EpisodesBuilder
from rlmesh_stream.consumers.builders.base import LOCK_BUCKETS, Reduced
from rlmesh_stream.consumers.sinks import SinkBatch, open_sink
from rlmesh_stream.consumers.sinks.postgres_sink import PostgresSink
from rlmesh_stream.consumers.tables import EPISODE_SESSION_ENDS, EPISODES
from rlmesh_stream.schemas.contract.partitioning import session_partition

pytestmark = pytest.mark.postgres

PARTITIONS = 12  # the topics' partition count (infra's default)


def _episodes(sessions: list[str]) -> Reduced:
    """An episodes batch: one running episode of each session."""
    reduced = Reduced()
    for sid in sessions:
        reduced.add(EPISODES, {"session_id": sid, "episode_record_id": f"{sid}-e0",
                               "status": "running"})
    return reduced


def _ends(sessions: list[str]) -> Reduced:
    """A batch of the sessions' ends."""
    reduced = Reduced()
    for sid in sessions:
        reduced.add(EPISODE_SESSION_ENDS, {"session_id": sid, "status": "ended"})
    return reduced


def _batch(reduced: Reduced) -> SinkBatch:
    builder = EpisodesBuilder()
    return SinkBatch(rows={t: reduced.sorted_rows(t) for t in builder.tables},
                     after_sql=list(builder.after_sql), locks=builder.lock_keys(reduced))


def _sessions(partitions: range, count: int) -> list[str]:
    """`count` session ids whose records the producer puts on `partitions`."""
    found: list[str] = []
    while len(found) < count:
        sid = str(uuid.uuid4())
        if session_partition(sid, PARTITIONS) in partitions:
            found.append(sid)
    return found


def _while_held(dsn: str, held: Reduced, other: Reduced) -> list[str]:
    """One writer holds `held`'s locks in an open transaction for 0.5 s while another
    applies `other`: what finished first."""
    first, second = open_sink(dsn), open_sink(dsn)
    assert isinstance(first, PostgresSink)
    order: list[str] = []
    holding = threading.Event()

    def hold() -> None:
        with first._transaction():
            first._lock_keys(sorted(set(EpisodesBuilder().lock_keys(held))))
            holding.set()
            time.sleep(0.5)
            order.append("held committed")

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        assert holding.wait(10)
        second.apply(_batch(other))
        order.append("other applied")
    finally:
        thread.join(10)
        first.close()
        second.close()
    return order


def test_a_session_read_from_another_partition_waits_for_its_partitions_writer(
        postgres_dsn: str) -> None:
    # the session's episodes come from its own partition (one member); its end, a record
    # keyed wrongly or placed by a foreign partitioner, from a partition another member
    # holds: the second writer still waits, or the abandon rule would read a half-written
    # session
    [sid] = _sessions(range(0, 6), 1)
    assert _while_held(postgres_dsn, _episodes([sid]), _ends([sid])) == [
        "held committed", "other applied"]


def test_members_of_disjoint_partition_ranges_do_not_wait_for_each_other(
        postgres_dsn: str) -> None:
    # a backlog's batches, 2 000 sessions each, of the two halves of 12 partitions (the
    # range assignment of a group of two)
    first_half, second_half = _sessions(range(0, 6), 2000), _sessions(range(6, 12), 2000)
    assert _while_held(postgres_dsn, _episodes(first_half), _ends(second_half)) == [
        "other applied", "held committed"]


def test_a_checkpoint_of_15000_sessions_locks_at_most_the_buckets_and_is_applied(
        postgres_dsn: str) -> None:
    sessions = [f"s{i:05d}" for i in range(15_000)]
    batch = _batch(_episodes(sessions))
    assert len(batch.locks) <= LOCK_BUCKETS
    sink = open_sink(postgres_dsn)
    try:
        sink.apply(batch)
        assert sink.query("SELECT count(*) FROM episodes") == [(15_000,)]
    finally:
        sink.close()

"""Which buffered records a checkpoint takes while a backlog is read: the aligned cut.

One runtime event's records are spread over one topic per event type: an episode's
`episode_started` and `episode_completed` sit in two topics, in the same partition
number (both keyed by the session). librdkafka fetches every partition at its own pace
(a topic of small records runs ahead of one of large records), so a checkpoint that
took the whole buffer split most episodes over two checkpoints: two upserts of one row
where one would do (107 000 rows upserted for 60 000 episodes over a 120 000-event
backlog).

While a backlog is read and the sink is the slower side (the runtime decides when:
`runtime/policy.py`), a checkpoint therefore takes of each partition the records up
to the *frontier*: the oldest of the newest timestamps read from the partitions that
have more to read. What was produced after it stays buffered for the next checkpoint,
which also holds the records produced alongside it in the partitions that lag. Each
partition's share of a cut is a prefix of what was read from it, so the offsets and
exactly-once hold as for a whole cut: only how records group into transactions moves.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

from rlmesh_stream.consumers.deadletter import DeadLetter
from rlmesh_stream.consumers.runtime.records import TP, Record

Item = Record | DeadLetter


def newest_stamps(buffer: list[Item]) -> dict[TP, datetime]:
    """The timestamp of the last record of each partition in `buffer` (records of a
    partition come in runs: looked at once per run)."""
    newest: dict[TP, datetime] = {}
    topic, partition = "", -1
    for item in reversed(buffer):
        if item.partition == partition and item.topic == topic:
            continue
        if type(item) is Record:  # a dead letter has no timestamp: the run's next does
            topic, partition = item.topic, item.partition
            newest.setdefault((topic, partition), item.timestamp)
    return newest


def frontier(newest: dict[TP, datetime], lagging: Collection[TP]) -> datetime | None:
    """The oldest newest timestamp among the partitions with more to read (None: none
    of them has records in the buffer, so nothing says what to hold back)."""
    stamps = [newest[tp] for tp in lagging if tp in newest]
    return min(stamps) if stamps else None


def split(buffer: list[Item], until: datetime, limit: int) -> tuple[list[Item], list[Item]]:
    """`buffer` as (the cut, what stays buffered): of each partition, its records up to
    the first one stamped after `until`, then the rest of that partition, in order.

    When more than `limit` records would stay, or none would be cut, the whole buffer is
    the cut: a partition far behind the others (older records, a slow fetch) must not
    hold the rest of the stream in memory."""
    cut: list[Item] = []
    held: list[Item] = []
    late: set[TP] = set()  # partitions whose later records stay buffered
    topic, partition = "", -1
    holding = False  # the current run's partition is late
    for item in buffer:
        if item.partition != partition or item.topic != topic:
            topic, partition = item.topic, item.partition
            holding = (topic, partition) in late
        if not holding and type(item) is Record and item.timestamp > until:
            late.add((topic, partition))
            holding = True
        (held if holding else cut).append(item)
    if len(held) > limit or not cut:
        return buffer, []
    return cut, held

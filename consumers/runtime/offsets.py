"""Assignment and offsets: which partitions this process holds, where each one's reading
starts (the sink's stored offsets, else the start rule of the mode), how far each is
read, the end offsets an offline run stops at, and the lag.

With `whole_sessions` (a member owns whole sessions), an offline run is read to its end
only when every partition of the topics is, to its end at start (`group_ends`): the ones
held by this process, the others as the sink says other members read them
(`others_read`, the stop rule's look at the sink, `until_end.py`).

The sink is the source of truth: each builder's next offsets are loaded from it at every
(re)assignment and rewind, and moved on only by a written checkpoint (`record_written`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaException, TopicPartition

from rlmesh_stream.consumers.builders import Builder
from rlmesh_stream.consumers.runtime.errors import ConsumerError
from rlmesh_stream.consumers.runtime.kafka_io import watermarks
from rlmesh_stream.consumers.runtime.options import RuntimeOptions
from rlmesh_stream.consumers.sinks import OffsetUpdate, Sink

if TYPE_CHECKING:
    from rlmesh_stream.consumers.deadletter import DeadLetter
    from rlmesh_stream.consumers.runtime.records import TP, Record

log = logging.getLogger(__name__)

# live mode: the seconds one assignment may spend asking partitions' watermarks
LIVE_MARKS_BUDGET_S = 5.0


def _marks_within(consumer: Consumer, tp: TopicPartition,
                  budget: float | None) -> tuple[int, int] | None:
    """The partition's (low, high) offsets: retried for as long as it takes without a
    `budget` (an offline run needs its end), else by the budget's monotonic deadline, or
    None once it has passed (the partition then starts as before: stored offset, or the
    reset rule, unchecked)."""
    if budget is None:
        return watermarks(consumer, tp)
    left = budget - time.monotonic()
    if left <= 0:
        return None
    try:
        low, high = consumer.get_watermark_offsets(tp, timeout=min(left, 2.0))
    except KafkaException as exc:
        log.info("no watermarks of %s[%d] at assignment (%s): not checked", tp.topic,
                 tp.partition, exc)
        return None
    return int(low), int(high)


class Offsets:
    """The partitions held and, per partition, the stored, next and end offsets."""

    def __init__(self, builders: list[Builder], prefix: str, options: RuntimeOptions) -> None:
        self.options = options
        self.builders = [b.name for b in builders]
        # per topic, the names of the builders that read it
        self.builders_of: dict[str, list[str]] = {}
        for b in builders:
            for t in b.topics_of(prefix):
                self.builders_of.setdefault(t, []).append(b.name)
        # per builder, per partition: the next offset the sink has applied (as stored)
        self.stored: dict[str, dict[TP, int]] = {name: {} for name in self.builders}
        self.assigned: set[TP] = set()
        self.next: dict[TP, int] = {}  # next offset to take from Kafka per partition
        self.ends: dict[TP, int] = {}  # --until-end: the end offset seen at assignment
        # the high watermark seen at assignment: the lag's floor until the consumer's own
        # fetches know the partition's end (its cached watermark is unknown until then)
        self.highs: dict[TP, int] = {}
        # live mode: each partition's end offset when reading started (None: not known)
        self.start_ends: dict[TP, int] | None = None
        # where reading each held partition started (a logical start resolved)
        self.starts: dict[TP, int] = {}
        # partitions read to an end past their last record (a transaction's commit
        # marker, an aborted transaction's records: the consumer hands neither over), and
        # that end: a checkpoint stores it once no record before it is left to store
        self.skipped: dict[TP, int] = {}
        # whole_sessions + --until-end: every partition of the topics, its end at start
        # (single_member, live: the partitions a lone member's first assignment holds)
        self.group_ends: dict[TP, int] = {}
        # between a revocation (or a loss) and the next assignment, and before the first:
        # what this member holds is not known, so it neither ends nor decides
        self.between_assignments = True
        # whole_sessions: whether the partitions given (held by others) are read to their
        # ends at start, as the sink says (None: not known, so not)
        self.others_read: Callable[[list[TP]], bool] | None = None

    # -- where reading starts --------------------------------------------------------

    def load(self, sink: Sink) -> None:
        """Every builder's stored offsets, as the sink has them now."""
        for name in self.builders:
            self.stored[name] = sink.load_offsets(name)

    def stored_any(self) -> bool:
        """Whether the sink held an offset for any builder when reading started."""
        return any(self.stored.values())

    def start_offset(self, key: TP) -> int:
        """Where `key` is read from: the lowest of its builders' stored offsets when all
        of them have one; otherwise the mode's rule (the beginning offline, the end when
        reading started live, all of a partition created since)."""
        stored = [self.stored[name].get(key) for name in self.builders_of[key[0]]]
        known = [o for o in stored if o is not None]
        if known and len(known) == len(stored):
            return min(known)
        if self.options.from_beginning:
            return OFFSET_BEGINNING
        if known or self.start_ends is None:
            return min(known) if known else OFFSET_END
        # live: where the partition ended at the start; created since: all of it is new
        return self.start_ends.get(key, OFFSET_BEGINNING)

    def assign(self, consumer: Consumer, partitions: list[TopicPartition],
               beyond_end: Callable[[TP, int, tuple[int, int]], int]
               ) -> list[TopicPartition]:
        """Take `partitions`: each at its start offset (--until-end: its end noted).

        A stored offset above the partition's end (its high watermark) means the topic
        was deleted and recreated (or truncated) since it was stored: `beyond_end(key,
        stored, (low, high))` says where to start instead, or raises."""
        assign = []
        # live: the watermarks are a check (a recreated topic) and a convenience (where a
        # partition with no stored offset starts), so they get a few seconds in all: during
        # a broker outage each partition it led would hold the rebalance callback (and
        # the whole group) for up to a minute
        budget = None if self.options.until_end else time.monotonic() + LIVE_MARKS_BUDGET_S
        for tp in partitions:
            key = (tp.topic, tp.partition)
            # one round trip a partition (in the rebalance callback, asking from other
            # threads at once waits for it to return)
            marks = _marks_within(consumer, tp, budget)
            start = self.start_offset(key)
            if marks is not None and start > marks[1]:
                start = beyond_end(key, start, marks)
            assign.append(TopicPartition(tp.topic, tp.partition, start))
            self.assigned.add(key)
            if marks is not None:
                self.highs[key] = marks[1]
            if self.options.until_end and marks is not None:
                # the end seen at start, or later at assignment (never less than the
                # watermark at assignment)
                self.ends[key] = max(self.group_ends.get(key, 0), marks[1])
            self.set_next(key, start, consumer if marks is not None else None, marks)
        return assign

    def check_single_member(self, partitions: Iterable[TP]) -> None:
        """A single-writer sink's first assignment is every partition known at start, or
        another process is a member of the group: stop before reading anything. (A member
        killed without leaving is no member by then: the group waits for it to rejoin
        until its session times out, then assigns everything to this one.)"""
        got = set(partitions)
        if self.group_ends.keys() <= got and got:
            return
        raise ConsumerError(
            f"consumer group {self.options.group_id} already has a member that holds "
            f"{len(self.group_ends.keys() - got)} of the topics' partitions: this format "
            "has one writer; stop the other process, or give this one its own --group")

    def reset(self, key: TP, above: int, to: int) -> list[OffsetUpdate]:
        """The updates that move each builder's stored offset of `key` that is above
        `above` back to `to` (fenced: from the offset stored now)."""
        return [OffsetUpdate(name, key[0], key[1], stored, to)
                for name in self.builders_of[key[0]]
                if (stored := self.stored[name].get(key)) is not None and stored > above]

    def set_next(self, key: TP, start: int, consumer: Consumer | None,
                 marks: tuple[int, int] | None = None) -> None:
        """Where reading `key` resumes; a logical start is resolved (from the partition's
        `marks`, its low and high offsets, when already known), so that where reading
        started is known, and stored, even for a partition that has no record to read."""
        self.skipped.pop(key, None)  # read again from `start`: an end seen is ahead
        if start >= 0:
            self.next[key] = self.starts[key] = start
        elif consumer is not None:
            low, high = marks or watermarks(consumer, TopicPartition(*key))
            self.next[key] = self.starts[key] = low if start == OFFSET_BEGINNING else high
        else:
            self.next.pop(key, None)
            self.starts.pop(key, None)

    def to_read(self, keys: Iterable[TP]) -> bool:
        """Whether any of `keys` has a record to read now: resumes below the end seen at
        its assignment (or either is unknown)."""
        return any(k not in self.next or k not in self.highs or self.next[k] < self.highs[k]
                   for k in keys)

    def forget(self, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            key = (tp.topic, tp.partition)
            self.assigned.discard(key)
            self.next.pop(key, None)
            self.ends.pop(key, None)
            self.highs.pop(key, None)
            self.starts.pop(key, None)
            self.skipped.pop(key, None)

    def reached_end(self, key: TP, end: int) -> None:
        """The consumer reached the end of a held partition at `end` (in line with the
        records: each one before it was read). Past the next offset expected, the
        offsets between were never handed over (control records, an aborted
        transaction's records): reading is at `end`, for the stop rule and the lag, and
        a checkpoint stores it (`take_skips`). Without it an --until-end run over a
        transactional producer's records never reached its end. With no next offset
        known (a live start whose watermarks did not answer), no record was handed over
        before the end: reading is there all the same."""
        if key not in self.assigned:
            return
        nxt = self.next.get(key)
        if nxt is None or end > nxt:
            self.next[key] = self.skipped[key] = end

    def take_skips(self, left: list[Record | DeadLetter]) -> dict[TP, int]:
        """The ends `reached_end` noted that a checkpoint stores now, no longer noted: those
        of partitions no record of which is `left` in the buffer (one before the end would
        be stored past, unapplied), above a stored offset. (Dropped, the checkpoint
        rewinds, and reading again to the end reports it again.)"""
        if not self.skipped:
            return {}
        held = {(item.topic, item.partition) for item in left} if left else set()
        due: dict[TP, int] = {}
        for key, end in list(self.skipped.items()):
            if key in held:
                continue
            del self.skipped[key]
            if any(self.stored[name].get(key, -1) < end for name in self.builders_of[key[0]]):
                due[key] = end
        return due

    # -- what a checkpoint stores ----------------------------------------------------

    def updates(self, progress: dict[TP, int]) -> list[OffsetUpdate]:
        """Each builder's offsets, from its stored ones to the cut's end (the fence)."""
        out = []
        for name in self.builders:
            stored = self.stored[name]
            for key, nxt in sorted(progress.items()):
                if name not in self.builders_of[key[0]]:
                    continue
                old = stored.get(key)
                if old is None or nxt > old:
                    out.append(OffsetUpdate(name, key[0], key[1], old, nxt))
        return out

    def unstored(self) -> dict[TP, int]:
        """Each held partition some builder has no stored offset for, and where reading it
        started. A checkpoint stores it (`Checkpoints.flush`): the group's next run then
        resumes there rather than by the start rule, which in live mode starts at the
        end and so skipped what landed between two runs in a partition empty so far."""
        return {key: position for key, position in self.starts.items()
                if key in self.assigned and any(
                    self.stored[name].get(key) is None for name in self.builders_of[key[0]])}

    def record_written(self, updates: list[OffsetUpdate]) -> None:
        """A written checkpoint's offsets are the stored ones now."""
        for u in updates:
            self.stored[u.builder][(u.topic, u.partition)] = u.next_offset

    def held(self, offsets: dict[TP, int]) -> list[TopicPartition]:
        """`offsets` of the partitions still held, to mirror into the group."""
        return [TopicPartition(t, p, o) for (t, p), o in offsets.items()
                if (t, p) in self.assigned]

    # -- how far reading is ----------------------------------------------------------

    def read_to_end(self) -> bool:
        """Every assigned partition read up to the end offset seen at assignment; with
        `whole_sessions`, every partition of the group up to its end at start."""
        if self.options.whole_sessions and self.group_ends:
            return self._group_read_to_end()
        if not self.assigned:
            return False
        return all(self.next.get(k, -1) >= self.ends.get(k, 0) for k in self.assigned)

    def _group_read_to_end(self) -> bool:
        """Every partition of the topics read to its end at start: by this process (the
        ones it holds), or, as the sink's stored offsets say, by other members (none for
        a single member). A member holding no partition ends once the others are done."""
        if self.between_assignments or not all(
                self.next.get(k, -1) >= self.ends.get(k, 0) for k in self.assigned):
            return False
        others = [k for k in self.group_ends if k not in self.assigned]
        if not others:
            return bool(self.assigned) or not self.group_ends
        if self.options.single_member or self.others_read is None:
            return False
        return self.others_read(others)

    def left_to_read(self) -> int:
        """Records left up to the end offsets seen at assignment (--until-end)."""
        return sum(max(0, end - self.next.get(key, 0)) for key, end in self.ends.items()
                   if key in self.assigned)

    def unapplied(self, consumer: Consumer | None) -> int | None:
        """Records not applied yet, the progress line's lag: from each held partition's
        applied position (`applied`) to its end. Records read and not yet written (in
        the buffer, in a checkpoint being written, read again after a registry outage)
        count: `lag_by_partition`, which counts from what is read, said 0 meanwhile.
        None when unknown."""
        if consumer is None or not self.assigned:
            return None
        total = 0
        for key in self.assigned:
            high = self._high(consumer, key)
            applied = self.applied(key)
            if high is None or applied is None:
                return None
            total += max(0, max(high, self.next.get(key, -1)) - applied)
        return total

    def _high(self, consumer: Consumer, key: TP) -> int | None:
        """The end of `key` as known without asking Kafka: the consumer's cached high
        watermark, never below the one seen at assignment (nor, --until-end, the end
        read to); None when neither is known. (Before the first fetch the cached one is
        unknown: counting from the reading position alone said `lag 0` then.)"""
        try:
            _, cached = consumer.get_watermark_offsets(TopicPartition(*key), cached=True)
        except KafkaException:
            return None
        high = max(cached, self.highs.get(key, -1), self.ends.get(key, -1))
        return high if high >= 0 else None

    def applied(self, key: TP) -> int | None:
        """The next offset of `key` every builder has applied: the lowest of their stored
        offsets, where reading started for one with none; None when unknown."""
        start = self.starts.get(key)
        positions = [self.stored[name].get(key, start) for name in self.builders_of[key[0]]]
        known = [p for p in positions if p is not None]
        return min(known) if known and len(known) == len(positions) else None

    def lag_by_partition(self, consumer: Consumer | None) -> dict[TP, int] | None:
        """Records behind the end offset, per assigned partition; None when unknown."""
        if consumer is None or not self.assigned:
            return None
        lags: dict[TP, int] = {}
        for key in self.assigned:
            high = self._high(consumer, key)
            if high is None:
                return None
            lags[key] = max(0, high - self.next.get(key, high))
        return lags

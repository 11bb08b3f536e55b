"""Checkpoints: a cut of the buffer reduced into ONE sink transaction (every builder's
rows, the dead letters and every partition's next offset), handed to the writer thread,
and accounted for once written (stored offsets, counts, the group's offsets,
`on_checkpoint`).

Dead letters reach the dead-letter topic before the offsets move. A checkpoint dropped by
the sink's offset fence, or whose letters Kafka did not take, makes the run rewind to the
last written one (`rewind`): nothing is skipped, nothing applied twice.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from confluent_kafka import KafkaException

from rlmesh_stream.consumers.builders import Builder, Reduced, reduce
from rlmesh_stream.consumers.deadletter import (
    DeadLetter,
    DeadLetterQueue,
    DeadLetterQueueError,
    LetterId,
)
from rlmesh_stream.consumers.runtime.checkpoint_writer import CheckpointWriter, ReadAgain, Written
from rlmesh_stream.consumers.runtime.errors import ConsumerError
from rlmesh_stream.consumers.runtime.offsets import Offsets
from rlmesh_stream.consumers.runtime.options import CheckpointInfo
from rlmesh_stream.consumers.runtime.policy import Buffered, CheckpointPolicy
from rlmesh_stream.consumers.runtime.records import TP, Record
from rlmesh_stream.consumers.runtime.redelivery import Redelivery
from rlmesh_stream.consumers.sinks import Sink, SinkBatch
from rlmesh_stream.consumers.tables import DELIVERY_MARKS, DELIVERY_MARKS_FORGET_SQL

if TYPE_CHECKING:  # only passed in: its import (prometheus_client) is the caller's
    from rlmesh_stream.consumers.metrics import ConsumerMetrics

log = logging.getLogger(__name__)


@dataclass
class _Checkpoint:
    """What is kept of a checkpoint in flight, to account for it once written."""

    buffer: list[Buffered]  # the records it applies, dead letters included
    dead: int  # dead letters among them
    by_builder: dict[str, list[Record]]
    progress: dict[TP, int]  # next offset per partition read
    started: float  # time.monotonic() when it was cut


class Checkpoints:
    """Cuts, writes (on the writer's thread) and accounts for checkpoints in order."""

    def __init__(self, sink: Sink, builders: list[Builder], group_id: str, prefix: str,
                 offsets: Offsets, policy: CheckpointPolicy, dlq: DeadLetterQueue,
                 commit: Callable[[dict[TP, int], bool], None]) -> None:
        self.sink, self.builders, self.group_id, self.prefix = sink, builders, group_id, prefix
        self.offsets, self.policy, self.dlq = offsets, policy, dlq
        self.writer: CheckpointWriter[_Checkpoint] = policy.writer
        self.commit = commit  # mirrors a written checkpoint's offsets into the group
        self.metrics: ConsumerMetrics | None = None
        self.on_checkpoint: Callable[[CheckpointInfo], None] | None = None
        self.rewind = False  # go back to the last written checkpoint before reading on
        # the last rewind's cause: the sink's fence (another process committed these
        # partitions since they were read), not a transient failure
        self.fenced = False
        self.events = 0  # records applied (committed) by this process
        self.dead_letters = 0
        # re-delivered records, dropped for every builder but those that count them
        self.redelivery = Redelivery(b.name for b in builders if b.drops_duplicates)
        # the sink keeps the builders' `Seen` states whole, with its own state (an
        # export), instead of as `delivery_marks` rows
        self.stores_seen = hasattr(sink, "load_seen")

    def load_stored(self) -> None:
        """Every builder's stored offsets and what tells re-deliveries apart, as the sink
        has them now (an assignment, a rewind): the two are stored together."""
        self.offsets.load(self.sink)
        self.redelivery.load(self.sink, self.offsets.stored)

    def flush(self, final: bool = False, wait: bool = False, align: bool = False) -> None:
        """Cut a checkpoint of the buffer (every builder's rows and every offset, one
        transaction) and hand it to the writer; `final` or `wait`: until it is written.
        `align`: while a backlog is read, the cut may leave each partition's newest
        records for the next one (`CheckpointPolicy.cut`).

        The cut is reduced while the writer may still be writing the checkpoint before
        it: the two hold different offsets of every partition, and only the offsets,
        which move on from where that one leaves them, wait for it to be accounted for
        (all of it waits for a sink that `reads_builder_state`).

        Nothing is cut while a rewind is pending: reading goes back to the stored offsets
        first (an offset cut meanwhile could pass records a dropped checkpoint held, never
        applied); the checkpoint in flight is still accounted for (a stop during a
        registry outage, a revocation: nothing may touch the sink while it is written).
        """
        self._flush(final, wait, align)
        if final and self.rewind:  # a checkpoint dropped (now or before) and not read again
            self._store_starts()

    def _flush(self, final: bool, wait: bool, align: bool) -> None:
        if self.rewind:
            self.finish(final=final)
            return
        policy = self.policy
        started = policy.last_cut = time.monotonic()
        if not policy.buffer or self.sink.reads_builder_state:
            dropped = self.finish(final=final)
            if dropped or not (policy.buffer or self.positions_pending(now=True)):
                return  # nothing to cut, or the one before was dropped: rewinding
        cut = policy.cut(align and not final)
        dead = [d for d in cut if isinstance(d, DeadLetter)]
        refused = self._send_dead_letters(dead, final)
        if refused is None:
            return
        batch, by_builder, progress = self.reduce(cut, refused, clean=not dead)
        if self.finish(final=final):  # one transaction at a time, in order
            return  # the one before was dropped: rewinding, this cut is read again
        for key, position in self.offsets.unstored().items():  # nothing of it in the cut
            progress.setdefault(key, position)
        for key, end in self.offsets.take_skips(self.policy.buffer).items():
            progress[key] = max(end, progress.get(key, end))
        batch.offsets.extend(self.offsets.updates(progress))
        self.writer.submit(batch, _Checkpoint(cut, len(dead), by_builder, progress, started))
        if final or wait:
            self.finish(final=final)

    def _store_starts(self) -> None:
        """A stop with a rewind pending: nothing read is stored, but where reading started
        in a partition with no stored offset is (an offsets-only checkpoint; it passes no
        record). Otherwise the group's next live run starts that partition at its end
        then, and what landed in between is never read. Best effort: dropped too (the
        fence) or failed, the stop goes on (the next run starts by the old rule)."""
        starts = self.offsets.unstored()
        if not starts or self.sink.reads_builder_state:
            return
        batch = SinkBatch(group_id=self.group_id)
        batch.offsets.extend(self.offsets.updates(starts))
        self.writer.submit(batch, _Checkpoint([], 0, {}, starts, time.monotonic()))
        try:
            self.finish(final=True)
        except Exception as exc:  # the sink's error: stopping anyway
            log.warning("where reading started was not stored (%s): the next live run "
                        "starts those partitions at their end", exc)

    def positions_pending(self, now: bool = False) -> bool:
        """A checkpoint is due even with no record to apply: a held partition has no
        stored offset yet (not for a sink that reads its builders' state: its offsets are
        its manifest's, stored with the records), or was read to an end past its last
        record (`Offsets.take_skips`). Those ends wait for the checkpoint interval (a
        live consumer after a transactional producer meets one at each of its commits,
        each an offsets-only transaction, an Iceberg snapshot) unless `now` or offline."""
        if self.rewind:
            return False
        if not self.sink.reads_builder_state and self.offsets.unstored():
            return True
        if not self.offsets.skipped:
            return False
        policy = self.policy
        return (now or policy.options.until_end
                or time.monotonic() - policy.last_cut >= policy.options.checkpoint_interval)

    def _send_dead_letters(self, dead: list[DeadLetter], final: bool
                           ) -> dict[LetterId, str] | None:
        """Before the offsets move: each letter at least once in the topic, or its refusal
        recorded (returned); None when Kafka is away and the run rewinds."""
        try:
            refused = self.dlq.send(dead) if dead else {}
        except (DeadLetterQueueError, KafkaException) as exc:
            self.finish(final=final)  # the one before is good
            if final:  # an offline run must not end as if everything was applied
                raise ConsumerError(f"{exc}; the last checkpoint was not written, run again "
                                    "to resume from the one before") from exc
            # Kafka is away: nothing moves until the letters are in; read again from the
            # stored offsets (the next attempt waits for Kafka as long as `send` does)
            log.warning("checkpoint not written, the dead-letter topic did not take its "
                        "letters (%s); rewinding to the last checkpoint", exc)
            self.rewind = True
            return None
        for letter_id, reason in refused.items():
            log.error("dead-letter topic %s refused %s[%d]@%d for good (%s); recorded in "
                      "dead_letters and skipped", self.dlq.topic, *letter_id, reason)
        return refused

    def finish(self, block: bool = True, final: bool = False) -> bool:
        """Account for the checkpoint in flight once written (`block`: wait for it):
        stored offsets, counts, the group's offsets, `on_checkpoint`. One dropped by a
        fence rewinds (True); one that failed raises its error here."""
        written: Written[_Checkpoint] | None = self.writer.finish(block)
        if written is None:
            return False
        if written.error is not None:
            raise written.error
        if written.conflict is not None:
            log.warning("checkpoint dropped: %s", written.conflict)
            self.rewind = True
            self.offsets.skipped.clear()  # reported again once read again to them
            self.fenced = not isinstance(written.conflict, ReadAgain)
            self.policy.drop()
            return True
        ck, batch = written.context, written.batch
        self.policy.cost = written.finished - ck.started
        self.offsets.record_written(batch.offsets)
        count = len(ck.buffer) - ck.dead  # a dead-lettered record is a Record too
        self.events += count  # every record read (dead-lettered ones included)
        self.dead_letters += ck.dead
        if self.metrics:
            self.metrics.checkpoint(ck.buffer, batch.rows, time.monotonic() - ck.started)
        self.commit(ck.progress, final)
        if self.on_checkpoint:
            self.on_checkpoint(CheckpointInfo(count - ck.dead, written.committed_at,
                                              ck.by_builder))
        return False

    def reduce(self, cut: list[Buffered], refused: dict[LetterId, str], clean: bool = False
               ) -> tuple[SinkBatch, dict[str, list[Record]], dict[TP, int]]:
        """A cut's rows (each builder's records it has not stored yet, reduced) and dead
        letters as a batch without offsets, the records by builder, and the offset after
        the cut in each partition.

        Reading the stored offsets before the checkpoint in flight is accounted for
        filters alike: that checkpoint ends where the cut begins, in every partition.
        `clean`: the cut holds no dead letter (only Records)."""
        batch = SinkBatch(group_id=self.group_id)
        first, progress = offset_ranges(cut)
        by_builder: dict[str, list[Record]] = {}
        shared = self.sink.shared_writers
        for b in self.builders:
            stored = self.offsets.stored[b.name]
            topics = set(b.topics_of(self.prefix))
            if all(t in topics and stored.get((t, p), -1) <= o for (t, p), o in first.items()):
                # all of it (a backlog's case)
                mine = cast(list[Record], cut) if clean else [
                    r for r in cut if type(r) is Record]
            else:
                mine = [r for r in cut if type(r) is Record and r.topic in topics
                        and r.offset >= stored.get((r.topic, r.partition), -1)]
            if b.drops_duplicates:
                mine = self.redelivery.keep(b.name, mine, stored)
            by_builder[b.name] = mine
            reduced: Reduced = reduce(b, mine)
            for table in b.tables:
                batch.rows[table] = reduced.sorted_rows(table)
            batch.after_sql.extend(b.after_sql)
            if shared:
                batch.locks.extend(b.lock_keys(reduced))
        self._add_seen(batch)
        for d in cut:
            if isinstance(d, DeadLetter):
                self._add_dead_letter(batch, d, refused.get(d.id))
        return batch, by_builder, progress

    def _add_seen(self, batch: SinkBatch) -> None:
        """The re-delivery states as of the cut's end, into its batch: whole, for a sink
        that keeps them (an export), or the changed producers' `delivery_marks` rows."""
        redelivery = self.redelivery
        if not redelivery.names:
            return
        if self.stores_seen:
            batch.seen = {name: redelivery.snapshot(name) for name in redelivery.names}
            return
        rows = [row for name in redelivery.names for row in redelivery.rows(name)]
        rows.sort(key=lambda r: (r["builder"], r["topic"], r["partition_id"],
                                 r["producer_id"]))
        batch.rows[DELIVERY_MARKS] = rows
        batch.after_sql.append(DELIVERY_MARKS_FORGET_SQL)
        redelivery.stored()

    def _add_dead_letter(self, batch: SinkBatch, d: DeadLetter, refused: str | None) -> None:
        names = ",".join(self.offsets.builders_of[d.topic])
        if refused is None:
            batch.add_dead_letter(names, d.topic, d.partition, d.offset, d.error,
                                  self.dlq.topic)
        else:
            batch.add_dead_letter(names, d.topic, d.partition, d.offset,
                                  f"{d.error}; not copied to the dead-letter topic "
                                  f"{self.dlq.topic}, which refused it: {refused}", None)


def offset_ranges(cut: list[Buffered]) -> tuple[dict[TP, int], dict[TP, int]]:
    """Per partition, the cut's first offset and the offset after its last: a partition's
    records are in offset order, in runs (looked at once per run)."""
    first: dict[TP, int] = {}
    after: dict[TP, int] = {}
    run: TP | None = None
    last = 0
    for item in cut:
        if run is None or item.partition != run[1] or item.topic != run[0]:
            if run is not None:
                after[run] = last + 1
            run = (item.topic, item.partition)
            first.setdefault(run, item.offset)
        last = item.offset
    if run is not None:
        after[run] = last + 1
    return first, after

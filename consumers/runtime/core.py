"""`ConsumerRuntime`: one consumer process, a group member running one or more builders.
It composes the parts (offsets, the checkpoint policy, checkpoints, the decoder cache,
the reader, the stop rule of --until-end) and owns what ties them together: the Kafka
consumer, the rebalance callbacks, the rewind after an outage, and the reading loop."""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from confluent_kafka import Consumer, KafkaException, Message, TopicPartition

from rlmesh_stream.consumers.builders import Builder
from rlmesh_stream.consumers.deadletter import DeadLetterQueue, check_dead_letter_topic
from rlmesh_stream.consumers.runtime import kafka_io
from rlmesh_stream.consumers.runtime.checkpoint import Checkpoints
from rlmesh_stream.consumers.runtime.checkpoint_writer import CheckpointWriter
from rlmesh_stream.consumers.runtime.decoding import Decoder, Decoders
from rlmesh_stream.consumers.runtime.errors import ConsumerError, RegistryDown
from rlmesh_stream.consumers.runtime.interpreter import tuned_for_reading
from rlmesh_stream.consumers.runtime.offsets import Offsets
from rlmesh_stream.consumers.runtime.options import CheckpointInfo, RuntimeOptions
from rlmesh_stream.consumers.runtime.policy import CheckpointPolicy
from rlmesh_stream.consumers.runtime.reader import Reader
from rlmesh_stream.consumers.runtime.records import TP
from rlmesh_stream.consumers.runtime.until_end import UntilEnd
from rlmesh_stream.consumers.sinks import OffsetConflict, Sink, SinkBatch
from rlmesh_stream.schemas.connection.config import StreamConfig
from rlmesh_stream.schemas.connection.redact import redact_secrets

if TYPE_CHECKING:  # only passed in: their imports (prometheus_client, rich) are the caller's
    from rlmesh_stream.consumers.metrics import ConsumerMetrics
    from rlmesh_stream.consumers.progress import Progress

log = logging.getLogger(__name__)
# Live start: how often the partitions' end offsets are asked for before giving up, and
# the pause before the second try (twice that before the third).
_END_OFFSET_TRIES = 3
_END_OFFSET_PAUSE_S = 0.5


class ConsumerRuntime:
    """One consumer process: a group member running one or more builders."""

    def __init__(
        self,
        config: StreamConfig,
        builders: list[Builder],
        sink: Sink,
        options: RuntimeOptions,
        *,
        decoder: Decoder | None = None,
        progress: Progress | None = None,
        on_checkpoint: Callable[[CheckpointInfo], None] | None = None,
        metrics: ConsumerMetrics | None = None,
        connection: kafka_io.Connection | None = None,
    ) -> None:
        self.config = config
        self.builders = builders
        self.sink = sink
        self.options = options
        self.progress = progress
        self.metrics = metrics
        prefix = config.topic_prefix
        self.topics = sorted({t for b in builders for t in b.topics_of(prefix)})
        self.offsets = Offsets(builders, prefix, options)
        # checkpoints are written on a thread of their own while reading goes on
        self.policy = CheckpointPolicy(options, self.offsets, CheckpointWriter(sink),
                                       self.lag_by_partition)
        dlq_topic = options.dlq_topic or f"{prefix}.dlq"
        try:  # an event topic would read its own letters back, for ever
            check_dead_letter_topic(dlq_topic, prefix, self.topics)
        except ValueError as exc:
            raise ConsumerError(f"dead-letter topic {exc}") from None
        self.dlq = DeadLetterQueue(config, dlq_topic)
        self.checkpoints = Checkpoints(sink, builders, options.group_id, prefix, self.offsets,
                                       self.policy, self.dlq, self._commit)
        self.checkpoints.metrics = metrics
        self.checkpoints.on_checkpoint = _both(
            progress.checkpointed if progress is not None else None, on_checkpoint)
        self.decoders = Decoders(config, builders, self.topics, decoder)
        # a consumer made before the sink was opened (`kafka_io.Connection`), or made by run()
        self._connection = connection
        self.errors = (connection.errors if connection is not None
                       else kafka_io.ConsumerErrors(config, options.group_id))
        self.reader = Reader(self.decoders, self.offsets, self.policy, self.errors)
        self.until_end = UntilEnd(config, options, self.topics, self.policy, sink)
        if options.whole_sessions:  # the end of the partitions other members hold
            self.offsets.others_read = self.until_end.others_read_to_end
        self._admin: Any = None  # AdminClient for the end offsets at start, made when needed
        self._stopping = False
        self._sink_preparing = False  # `_prepare_sink` started (at most once)
        # --until-end: the run read everything to the end and its last checkpoint (and the
        # sink's last decisions) were written; a run stopped before then decides nothing
        self.reached_end = False
        self._failed: ConsumerError | None = None  # raised by the loop before reading on
        # the run failed: leaving the group (the revoke at close) cuts no checkpoint
        self._aborted = False
        self.consumer: Consumer | None = None

    @property
    def events(self) -> int:
        """Records applied (committed) by this process."""
        return self.checkpoints.events

    @property
    def dead_letters(self) -> int:
        return self.checkpoints.dead_letters

    @property
    def first_record_at(self) -> float | None:
        """Monotonic time of the first record read."""
        return self.reader.first_record_at

    @property
    def assignment(self) -> list[TP]:
        """The partitions this process holds now."""
        return sorted(self.offsets.assigned)

    # -- lifecycle ------------------------------------------------------------------

    def stop(self, *_: Any) -> None:
        """Ask the loop to finish its checkpoint and leave the group.

        As a signal handler (SIGTERM, first Ctrl-C) it stops gracefully; a second
        Ctrl-C interrupts at once (nothing is lost: the sink has the offsets).
        """
        self._stopping = True
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, signal.default_int_handler)

    def run(self) -> None:
        handlers: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():
            handlers = {sig: signal.signal(sig, self.stop)
                        for sig in (signal.SIGTERM, signal.SIGINT)}
        self.consumer = (self._connection.consumer if self._connection is not None
                         else Consumer(self._kafka_config()))
        if self.options.until_end:
            self.until_end.check_topics(self.consumer, self.errors)
            if self.options.whole_sessions:
                self.offsets.group_ends = self.until_end.group_ends(self.consumer)
        elif not self.options.from_beginning:
            self.offsets.start_ends = self._ends_at_start()
        if self.options.single_member and not self.options.until_end:
            # live: the partitions a lone member's first assignment must hold
            ends = (self._ends_at_start() if self.options.from_beginning
                    else self.offsets.start_ends)  # asked once either way
            self.offsets.group_ends = ends or {}
        self.consumer.subscribe(self.topics, on_assign=self._on_assign,
                                on_revoke=self._on_revoke, on_lost=self._on_lost)
        self.until_end.joined_at = time.monotonic()
        # the group join is a wait: import and compile what the first batch needs meanwhile
        self.decoders.warming = True
        threading.Thread(target=self._warm_up, name="rlmesh-warm-up", daemon=True).start()
        writer = self.policy.writer
        try:
            with tuned_for_reading():
                self._loop()
        except BaseException:
            # the checkpoint in flight: written or not, the sink knows. Not accounted for,
            # so no other may follow (the revoke at close cut one on stale offsets, and
            # the process fenced itself: "another consumer has applied these records")
            self._aborted = True
            writer.close()
            raise
        finally:
            if self.progress:
                self.progress.update(self.events, self._lag())
                self.progress.close()
            self.consumer.close()
            writer.close()
            self.dlq.close()
            for sig, handler in handlers.items():
                signal.signal(sig, handler)

    def _warm_up(self) -> None:
        """On a thread while the group is joined: the decoding, which the first batch
        waits for; then, live, the sink's staging (pyarrow), which the first checkpoint
        needs (an offline run prepares it once it has records to read: `_on_assign`)."""
        self.decoders.warm_up()
        if not self.options.until_end:
            self._prepare_sink()

    def _prepare_sink(self) -> None:
        """The sink's staging (pyarrow, ~70 ms of CPU), ahead of the first checkpoint with
        rows. Not in an offline run that has nothing to read: on a thread, its import held
        the GIL from the main thread. Best effort for what the first batch meets again and
        reports (a missing module, a store that cannot be reached): `Sink.prepare`."""
        try:
            self.sink.prepare()
        except (ImportError, OSError) as exc:
            log.debug("warm-up of the sink failed: %s", exc)

    def _loop(self) -> None:
        """Read and checkpoint until stopped or (--until-end) at the end, then the last
        checkpoint."""
        assert self.consumer is not None
        checkpoints, policy = self.checkpoints, self.policy
        backoff = 0.5
        down_since: float | None = None  # the registry has not answered since
        while not self._stopping:
            if checkpoints.rewind:
                self._do_rewind()
            messages = self._consume()
            if self._failed is not None:  # before any record of the assignment is taken
                raise self._failed
            # a full batch means a backlog: checkpoints may then be spaced out
            policy.behind = len(messages) >= self.options.poll_batch
            if self.metrics:
                self.metrics.read(messages)
            attempt = time.monotonic()
            try:
                self.reader.ingest(messages)
                backoff = 0.5
                if messages:
                    down_since = None
            except RegistryDown as exc:
                checkpoints.flush()  # what was decoded before the outage is good
                down_since = down_since or attempt  # a request may have taken its timeout
                wait = self._registry_wait(exc, down_since, backoff)
                log.warning("schema registry unavailable (%s); retrying in %.1fs, "
                            "nothing skipped", exc, wait)
                if self.progress:
                    self.progress.update(self.events, self._lag())
                    self.progress.note(f"registry unavailable, retrying in {wait:.1f}s")
                checkpoints.rewind = True
                time.sleep(wait)
                backoff = min(backoff * 2, 10.0)
                continue
            checkpoints.finish(block=False)  # account for a written one at once
            if policy.due() or (not policy.buffer and not policy.writer.busy
                                and checkpoints.positions_pending()):
                checkpoints.flush(align=True)
            if self.progress:
                self.progress.update(self.events, self._lag())
            if self.metrics:
                self.metrics.tick(self.lag_by_partition)
            if (self.options.until_end and not checkpoints.rewind
                    and self.until_end.done(self.consumer) and self._end()):
                break
        checkpoints.flush(final=True)
        if self.metrics:
            self.metrics.tick(self.lag_by_partition, force=True)

    def _end(self) -> bool:
        """--until-end, everything read: the last checkpoint, then the sink's last decisions
        (`at_end`, while this process still holds its partitions). False when the fence
        dropped either (another process committed these partitions since they were read):
        the run reads again from the sink's offsets, and ends only once that is written
        (it used to end there, exit 0, that checkpoint's episodes not exported)."""
        self.checkpoints.flush(final=True)
        if self.checkpoints.rewind:
            return False
        try:
            self.sink.at_end()
        except OffsetConflict as exc:
            log.warning("last decisions dropped: %s", exc)
            self.checkpoints.rewind = self.checkpoints.fenced = True
            return False
        self.reached_end = True
        return True

    def _registry_wait(self, exc: RegistryDown, down_since: float, backoff: float) -> float:
        """How long to wait before retrying a registry that does not answer: `backoff`,
        for as long as it takes live; an offline run (--until-end) gives up once it has
        not answered for `connect_timeout` seconds, with an error naming it (nothing is
        skipped: the next run resumes from the last checkpoint)."""
        if not self.options.until_end:
            return backoff
        left = down_since + self.config.connect_timeout - time.monotonic()
        if left > 0:
            return min(backoff, left)
        raise ConsumerError(redact_secrets(
            f"schema registry at {self.config.registry_url} did not answer for "
            f"{self.config.connect_timeout:g} s ({exc}): check --registry-url and "
            "--registry-timeout; nothing skipped, run again to resume from the last "
            "checkpoint", self.config.registry_url)) from exc

    def _consume(self) -> list[Message]:
        """The records already fetched, up to `poll_batch`, at once; when there are none,
        wait up to `poll_timeout` for some. librdkafka's batch consume waits for a full
        batch until the timeout, so asking with a timeout first idled at every partial
        batch: at the end of a backlog, and whenever the fetches fell behind the reading
        (half a bare loop's wall time over 120 000 records was such waits of 0.5 s)."""
        assert self.consumer is not None
        messages = self.consumer.consume(self.options.poll_batch, 0)
        # live: at the stream's head (policy.due); end-of-partition reports are no records
        self.policy.caught_up = all(m.error() is not None for m in messages)
        if messages:
            return messages
        return self.consumer.consume(self.options.poll_batch, self.options.poll_timeout)

    def _ends_at_start(self) -> dict[TP, int] | None:
        """Live mode: each of the topics' partitions and its end offset as reading starts
        (None: Kafka did not answer in `_END_OFFSET_TRIES` tries, and each partition
        starts at its end when assigned: what is published while the group forms is then
        not read, hence the tries and the warning). A partition the sink has no offset
        for starts there, so what is published while the group forms is read; one
        created later holds only records from after the start, and is read from its
        first (`Offsets.start_offset`)."""
        assert self.consumer is not None
        for attempt in range(1, _END_OFFSET_TRIES + 1):
            try:
                return kafka_io.end_offsets(self.consumer, self._admin_client, self.topics)
            except Exception as exc:  # any failure: try again, then the old rule; no crash
                failure = exc
            if attempt == _END_OFFSET_TRIES or not self._pause(_END_OFFSET_PAUSE_S * attempt):
                break
        log.warning("no end offsets at start after %d tries (%s): a partition without a "
                    "stored offset starts at its end when assigned", attempt, failure)
        return None

    def _pause(self, seconds: float) -> bool:
        """Wait `seconds` unless a stop (SIGTERM, Ctrl-C) comes first; False if it came."""
        until = time.monotonic() + seconds
        while not self._stopping and time.monotonic() < until:
            time.sleep(0.05)
        return not self._stopping

    def _admin_client(self) -> Any:
        from confluent_kafka.admin import AdminClient

        if self._admin is None:
            self._admin = AdminClient(self.config.kafka_config())
        return self._admin

    def _kafka_config(self) -> dict[str, Any]:
        return kafka_io.kafka_config(self.config, self.options, self.errors)

    # -- rebalancing ----------------------------------------------------------------

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Seek every newly assigned partition to the offset stored in the sink."""
        self.offsets.between_assignments = False
        first = self.until_end.assigned()  # called at each rebalance, even with nothing
        self.checkpoints.finish()  # the offsets it stores are the ones to load
        if first and self.options.single_member:
            self.offsets.check_single_member((tp.topic, tp.partition) for tp in partitions)
        self._rewound(sorted((tp.topic, tp.partition) for tp in partitions))
        self.checkpoints.load_stored()
        assign = self.offsets.assign(consumer, partitions, self._beyond_end)
        consumer.assign(assign)  # eager (range): `partitions` is the whole new assignment
        # the sink's offsets, mirrored into the group for lag tools
        kafka_io.commit(consumer, [tp for tp in assign if tp.offset >= 0])
        log.info("assigned %s", sorted(self.offsets.assigned))
        if (self.options.until_end and not self._sink_preparing
                and self.offsets.to_read((tp.topic, tp.partition) for tp in assign)):
            self._sink_preparing = True
            threading.Thread(target=self._prepare_sink, name="rlmesh-sink-warm-up",
                             daemon=True).start()

    def _beyond_end(self, key: TP, stored: int, marks: tuple[int, int]) -> int:
        """A stored offset above the partition's end: its topic was deleted and recreated
        (or truncated). Reading on from the stored offset would skip, silently, every
        record the new topic gets up to it: the run stops before reading (the loop
        raises the error), unless `reset_recreated`, where the stored offsets are moved
        back to the partition's first record (fenced) and it is read from there."""
        low, high = marks
        where = f"{key[0]}[{key[1]}]"
        if not self.options.reset_recreated:
            self._failed = self._failed or ConsumerError(
                f"{where}: the next offset stored in the sink ({stored}) is beyond the "
                f"partition's end ({high}): its topic was deleted and recreated (or "
                "truncated) since; nothing read. To read it again from its first record, "
                "run `consume` once with --reset-recreated")
            return stored
        self.sink.apply(SinkBatch(group_id=self.options.group_id,
                                  offsets=self.offsets.reset(key, high, low)))
        self.checkpoints.load_stored()
        log.warning("%s: stored offset %d beyond the partition's end %d (topic recreated): "
                    "read again from offset %d (--reset-recreated)", where, stored, high, low)
        return self.offsets.start_offset(key)

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Checkpoint what was read before the partitions go to another member (not after
        the run failed: the next run reads it again from the sink's offsets)."""
        if not self._aborted:
            self.checkpoints.flush(wait=True)
        read = dict(self.offsets.next)  # everything below it is in the flushed checkpoint
        self.offsets.forget(partitions)
        self._revoked(None if self._aborted or self.checkpoints.rewind else read)
        self._unassign(consumer, partitions)

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Partitions lost without a revoke: their buffered records must not be written."""
        self.checkpoints.finish()  # cut before the loss: fenced like any other
        self.policy.drop()
        self.offsets.forget(partitions)
        if self.options.single_member:  # its session timed out (a pause, a zombie): the
            self.until_end.first_assigned_at = None  # next assignment is checked as a newcomer's
        self._revoked(None)
        self.checkpoints.rewind = True
        self._unassign(consumer, partitions)

    def _rewound(self, partitions: list[TP]) -> None:
        """Tell a sink that keeps state between checkpoints that `partitions` are read
        again from its stored offsets (an assignment, a loss, a rewind): it goes back to
        its committed state."""
        self.sink.rewound(partitions)

    def _revoked(self, read: dict[TP, int] | None) -> None:
        """Tell a sink that keeps state per partition that it holds none now (an eager
        revocation or a loss takes them all); `read`: the next offset read per partition,
        everything below it committed (None: not all of it is: a loss, a failed run, a
        fenced last checkpoint)."""
        if self.options.whole_sessions:
            self.offsets.between_assignments = True
            self.sink.revoked(read)

    def _unassign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        consumer.unassign()  # eager (range): every partition is revoked at once

    def _do_rewind(self) -> None:
        """Drop the buffer and go back to the sink's offsets for every assigned partition."""
        assert self.consumer is not None
        if self.checkpoints.fenced and self.options.whole_sessions and self._moved_away():
            return
        self.checkpoints.finish()
        self.policy.drop()
        self._rewound(sorted(self.offsets.assigned))
        self.checkpoints.load_stored()
        starts = [TopicPartition(k[0], k[1], self.offsets.start_offset(k))
                  for k in sorted(self.offsets.assigned)]
        unsought = False
        for tp in starts:
            try:
                self.consumer.seek(tp)
            except KafkaException as exc:  # not fetching yet: assigned again at the offset
                log.debug("seek %s[%d] failed (%s); reassigning", tp.topic, tp.partition, exc)
                unsought = True
            self.offsets.set_next((tp.topic, tp.partition), tp.offset, self.consumer)
        if unsought:  # eager (range): the whole assignment, each partition at its start
            self.consumer.assign(starts)
        self.checkpoints.rewind = False

    def _moved_away(self) -> bool:
        """Fenced (another process committed this member's shards since it read them):
        whether the group's coordinator has given them to another member. Then this one
        drops them and waits for its next assignment instead of claiming them back (a
        member paused past its session timeout, a zombie, took its old shards back from
        their new owner, fencing it in turn, until Kafka dropped it). Unknown (the
        coordinator does not answer): claimed back, as before."""
        assert self.consumer is not None
        self.checkpoints.fenced = False
        owned = kafka_io.member_partitions(self._admin_client(), self.options.group_id,
                                           self.consumer.memberid() or "")
        if owned is None or self.offsets.assigned <= owned:
            return False
        log.warning("fenced, and group %s gives %d of this member's partitions to another: "
                    "dropped until its next assignment", self.options.group_id,
                    len(self.offsets.assigned - owned))
        self.checkpoints.finish()
        self.policy.drop()
        self.offsets.forget([TopicPartition(*key) for key in sorted(self.offsets.assigned)])
        self._revoked(None)
        self.consumer.unassign()
        self.checkpoints.rewind = False
        return True

    def _commit(self, progress: dict[TP, int], wait: bool) -> None:
        """Mirror a written checkpoint's offsets into the group, for lag tools only."""
        assert self.consumer is not None
        kafka_io.commit(self.consumer, self.offsets.held(progress), wait)

    # -- progress ---------------------------------------------------------------------

    def _lag(self) -> int | None:
        """The progress line's lag: records not applied yet (read or not)."""
        return self.offsets.unapplied(self.consumer)

    def lag_by_partition(self) -> dict[TP, int] | None:
        """Records behind the end offset, per assigned partition; None when unknown."""
        return self.offsets.lag_by_partition(self.consumer)


def _both(first: Callable[[CheckpointInfo], None] | None,
          second: Callable[[CheckpointInfo], None] | None
          ) -> Callable[[CheckpointInfo], None] | None:
    """One checkpoint callback calling both (the progress line's count, the caller's)."""
    if first is None or second is None:
        return first or second

    def call(info: CheckpointInfo) -> None:
        first(info)
        second(info)

    return call

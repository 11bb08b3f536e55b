"""The consumer runtime every builder shares: read, reduce, write rows + offsets at once.

Modelled on quixstreams' sinks: records are buffered per topic partition and
flushed at a checkpoint (every `checkpoint_interval` seconds or `max_batch`
records), here as ONE sink transaction holding every builder's rows and every
partition's next offset. On each (re)assignment the runtime seeks to the
offsets stored in the sink, not Kafka's: the sink is the source of truth, so a
crash at any instant leaves the tables as if each record was applied exactly
once. Offsets are also committed to Kafka after each checkpoint, so lag tools
see the group's progress.

Records that cannot be decoded go to the dead-letter topic and the
`dead_letters` table; a registry that is down makes the runtime rewind to the
last checkpoint and retry with back-off, never skip.

Size (over 500 lines, on purpose): `ConsumerRuntime` is one state machine (assignment,
buffered batches, offsets stored in the sink, the rewind after a registry outage,
--until-end's stop rule) whose steps all read and change the same state under the
same lock; the helpers that need none of it (watermarks, headers) are functions at the
bottom, and writing a checkpoint is `checkpoint_writer.py`'s. Splitting the class would
pass that state between objects.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, cast

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from rlmesh_stream.consumers import aligned_cut
from rlmesh_stream.consumers.builders import Builder, Reduced, reduce
from rlmesh_stream.consumers.builders.projection import Projection
from rlmesh_stream.consumers.checkpoint_writer import CheckpointWriter, Written
from rlmesh_stream.consumers.deadletter import (
    DeadLetter,
    DeadLetterQueue,
    DeadLetterQueueError,
    LetterId,
)
from rlmesh_stream.consumers.interpreter import tuned_for_reading
from rlmesh_stream.consumers.records import Record, timestamp_of
from rlmesh_stream.consumers.sinks import OffsetUpdate, Sink, SinkBatch
from rlmesh_stream.schemas import wire
from rlmesh_stream.schemas.access import (
    AccessDeniedError,
    RateLimitedLog,
    kafka_access_message,
)
from rlmesh_stream.schemas.client_errors import LIBRDKAFKA_LOG
from rlmesh_stream.schemas.config import StreamConfig
from rlmesh_stream.schemas.errors import (
    DecodeError,
    RegistryProtocolError,
    RegistryUnavailableError,
    WrongEventTypeError,
)
from rlmesh_stream.schemas.topics import EventType, event_type_of_topic, subject_name

if TYPE_CHECKING:  # only passed in: their imports (prometheus_client, rich) are the caller's
    from rlmesh_stream.consumers.metrics import ConsumerMetrics
    from rlmesh_stream.consumers.progress import Progress

log = logging.getLogger(__name__)

TP = tuple[str, int]
_UNSEEN = object()  # a value header not looked up yet
# longer than a value header, so a run's first record looks its reader up (a value that
# does start with it has no reader in hand, and is decoded whole)
_NO_HEAD = b"\xff" * 6
# The headers of a record whose builders read none: one shared dict, never written to.
_NO_HEADERS: dict[str, bytes] = {}


class Decoder(Protocol):
    def decode(self, value: bytes) -> Any: ...


@dataclass
class RuntimeOptions:
    group_id: str
    from_beginning: bool = False
    until_end: bool = False
    max_batch: int = 20_000  # records per checkpoint
    checkpoint_interval: float = 1.0  # seconds between checkpoints
    poll_batch: int = 2_000
    poll_timeout: float = 0.1
    dlq_topic: str | None = None  # default: {prefix}.dlq
    instance_id: str | None = None  # static group membership: a restart takes over at once
    # --until-end with no partitions: how long after its first assignment a process waits
    # for the group to settle before it stops (None: three session timeouts)
    settle_time: float | None = None
    # --until-end: how long to wait for Kafka's metadata before giving up with an error
    connect_timeout: float = 15.0
    # Sessions owned whole (the dataset export, docs/datasets.md "Consumer groups"): a
    # range assignment (partition i of every topic to one member), the sink reset to its
    # committed state whenever reading goes back to its offsets (`rewound`), and
    # --until-end ending when every partition of the topics is read to the end offsets
    # seen at start.
    whole_sessions: bool = False
    # with `whole_sessions`: one member only (a single-writer format); a process whose
    # first assignment is not every partition stops with a ConsumerError
    single_member: bool = False
    kafka_overrides: dict[str, Any] = field(default_factory=dict)


@dataclass
class CheckpointInfo:
    """What one committed checkpoint applied (for progress and latency measurement)."""

    records: int  # records decoded and applied (dead letters not included)
    committed_at: float  # time.time() right after the sink's commit
    records_by_builder: dict[str, list[Record]]


@dataclass
class _Checkpoint:
    """What the runtime keeps of a checkpoint in flight, to account for it once written."""

    buffer: list[Record | DeadLetter]  # the records it applies, dead letters included
    dead: int  # dead letters among them
    by_builder: dict[str, list[Record]]
    progress: dict[TP, int]  # next offset per partition read
    started: float  # time.monotonic() when it was cut


class _RegistryDown(Exception):
    pass


class ConsumerError(Exception):
    """The run cannot go on (no Kafka or no topics for --until-end, a registry URL that
    leads to something else); the message says why and what to check.

    Nothing is skipped: the sink holds the offsets of the last checkpoint, so running
    again resumes there."""


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
    ) -> None:
        self.config = config
        self.builders = builders
        self.sink = sink
        self.options = options
        self.progress = progress
        self.on_checkpoint = on_checkpoint
        self.metrics = metrics
        self._decoder = decoder
        prefix = config.topic_prefix
        self.topics = sorted({t for b in builders for t in b.topics_of(prefix)})
        self._builders_of: dict[str, list[Builder]] = {
            t: [b for b in builders if t in b.topics_of(prefix)] for t in self.topics
        }
        self._event_type: dict[str, EventType] = {
            t: event_type_of_topic(t, prefix) for t in self.topics
        }
        self._needs_decode = {t: any(b.needs_decode for b in bs)
                              for t, bs in self._builders_of.items()}
        # header-only builders (delivery checks) are the ones that read headers
        self._reads_headers = {t: any(not b.needs_decode for b in bs)
                               for t, bs in self._builders_of.items()}
        # per topic, what the hot path needs: (event type, decode?, read headers?, the
        # projection its one decoding builder reads, when that builder is packed)
        self._plans = {t: (self._event_type[t], self._needs_decode[t], self._reads_headers[t],
                           self._packer(t)) for t in self.topics}
        # per topic, per 5-byte value header (magic byte, schema id): the generated reader
        # of the topic's projection, or None (decode whole events)
        self._projectors: dict[str, dict[bytes, Any]] = {t: {} for t in self.topics}
        self._any_decode = any(self._needs_decode.values())
        self._stamps: dict[int, Any] = {}  # record timestamp (ms) -> its datetime
        self._behind = False  # the last consume() returned a full batch
        self._flush_cost = 0.0  # seconds the last checkpoint took
        # checkpoints are written on a thread of their own while reading goes on
        self._writer: CheckpointWriter[_Checkpoint] = CheckpointWriter(sink)
        self.dlq = DeadLetterQueue(config, options.dlq_topic or f"{prefix}.dlq")
        # per builder, per partition: the next offset the sink has applied (as stored)
        self._stored: dict[str, dict[TP, int]] = {b.name: {} for b in builders}
        self._assigned: set[TP] = set()
        self._next: dict[TP, int] = {}  # next offset to take from Kafka per partition
        self._ends: dict[TP, int] = {}  # --until-end: the end offset seen at assignment
        # live mode: each partition's end offset when reading started (None: not known)
        self._start_ends: dict[TP, int] | None = None
        self._first_assigned_at: float | None = None  # monotonic time of the first assignment
        # whole_sessions + --until-end: every partition of the topics, its end at start
        self._group_ends: dict[TP, int] = {}
        # between a revocation (or a loss) and the next assignment, and before the first:
        # what this member holds is not known, so it neither ends nor decides
        self._between_assignments = True
        self._idle_checked_at = 0.0  # --until-end without partitions: last look at the group
        self._admin: Any = None  # AdminClient describing the group, made when first needed
        self._buffer: list[Record | DeadLetter] = []
        self._held = 0  # records at the buffer's head that the last cut left for the next
        self._last_flush = time.monotonic()
        self._rewind = False
        self._stopping = False
        self.events = 0  # records applied (committed) by this process
        self.first_record_at: float | None = None  # monotonic time of the first record read
        self.dead_letters = 0
        self.consumer: Consumer | None = None
        self._last_error = ""  # the last client-level error, to explain a failure
        self._error_log = RateLimitedLog()
        self._checking_topics = False
        self._warming: threading.Thread | None = None
        self._decoding_warmed = threading.Event()  # what the first batch needs is made

    def _packer(self, topic: str) -> Projection | None:
        """The projection the runtime reads straight from the payloads of `topic`: when
        its one decoding builder is packed (other builders read headers only)."""
        decoding = [b for b in self._builders_of[topic] if b.needs_decode]
        if len(decoding) != 1 or not decoding[0].packed:
            return None
        return decoding[0].projections[self._event_type[topic]]

    # -- lifecycle ------------------------------------------------------------------

    def stop(self, *_: Any) -> None:
        """Ask the loop to finish its checkpoint and leave the group.

        As a signal handler (SIGTERM, first Ctrl-C) it stops gracefully; a second
        Ctrl-C interrupts at once (nothing is lost: the sink has the offsets).
        """
        self._stopping = True
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, signal.default_int_handler)

    @property
    def assignment(self) -> list[TP]:
        """The partitions this process holds now."""
        return sorted(self._assigned)

    def run(self) -> None:
        handlers: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():
            handlers = {sig: signal.signal(sig, self.stop)
                        for sig in (signal.SIGTERM, signal.SIGINT)}
        self.consumer = Consumer(self._kafka_config())
        if self.options.until_end:
            self._check_topics()
            if self.options.whole_sessions:
                self._group_ends = self._high_watermarks()
                if not self._group_ends:
                    raise ConsumerError(f"cannot list the end offsets of the topics under "
                                        f"{self.config.topic_prefix!r} at "
                                        f"{self.config.bootstrap}; run again")
        elif not self.options.from_beginning:
            self._start_ends = self._ends_at_start()
        if self.options.single_member and not self.options.until_end:
            # live: the partitions a lone member's first assignment must hold
            self._group_ends = self._start_ends or self._ends_at_start() or {}
        self.consumer.subscribe(self.topics, on_assign=self._on_assign,
                                on_revoke=self._on_revoke, on_lost=self._on_lost)
        # the group join is a wait: import and compile what the first batch needs meanwhile
        self._warming = threading.Thread(target=self._warm_up, name="rlmesh-warm-up",
                                         daemon=True)
        self._warming.start()
        try:
            with tuned_for_reading():
                self._loop()
        except BaseException:
            self._writer.close()  # the checkpoint in flight: written or not, the sink knows
            raise
        finally:
            if self.progress:
                self.progress.update(self.events, self._lag())
                self.progress.close()
            self.consumer.close()
            self._writer.close()
            self.dlq.close()
            for sig, handler in handlers.items():
                signal.signal(sig, handler)

    def _loop(self) -> None:
        """Read and checkpoint until stopped or (--until-end) at the end, then the last
        checkpoint."""
        assert self.consumer is not None
        backoff = 0.5
        while not self._stopping:
            if self._rewind:
                self._do_rewind()
            messages = self._consume()
            # a full batch means a backlog: checkpoints may then be spaced out
            self._behind = len(messages) >= self.options.poll_batch
            if self.metrics:
                self.metrics.read(messages)
            try:
                self._ingest_all(messages)
                backoff = 0.5
            except _RegistryDown as exc:
                self._flush()  # what was decoded before the outage is good
                log.warning("schema registry unavailable (%s); retrying in %.1fs, "
                            "nothing skipped", exc, backoff)
                if self.progress:
                    self.progress.note(f"registry unavailable, retrying in {backoff:.1f}s")
                self._rewind = True
                time.sleep(backoff)
                backoff = min(backoff * 2, 10.0)
                continue
            self._finish_checkpoint(block=False)  # account for a written one at once
            if self._checkpoint_due():
                self._flush(align=True)
            if self.progress:
                self.progress.update(self.events, self._lag())
            if self.metrics:
                self.metrics.tick(self.lag_by_partition)
            if self.options.until_end and (self._at_end() or self._idle_and_settled()):
                break
        self._flush(final=True)
        at_end = getattr(self.sink, "at_end", None)
        if self.options.until_end and at_end is not None:
            at_end()  # while this process still holds its partitions
        if self.metrics:
            self.metrics.tick(self.lag_by_partition, force=True)

    def _consume(self) -> list[Message]:
        """The records already fetched, up to `poll_batch`, at once; when there are none,
        wait up to `poll_timeout` for some. librdkafka's batch consume waits for a full
        batch until the timeout, so asking with a timeout first idled at every partial
        batch: at the end of a backlog, and whenever the fetches fell behind the reading
        (docs/benchmarks.md, "Round four")."""
        assert self.consumer is not None
        messages = self.consumer.consume(self.options.poll_batch, 0)
        if messages:
            return messages
        return self.consumer.consume(self.options.poll_batch, self.options.poll_timeout)

    def _check_topics(self) -> None:
        """--until-end: Kafka answers and at least one of the topics exists, or an error.

        Without it an offline run waits forever for an assignment that cannot come: a
        broker that is not there, or a topic prefix no producer has written under."""
        assert self.consumer is not None
        timeout = self.options.connect_timeout
        try:
            found = _existing_topics(self.consumer, self.topics, timeout)
        except KafkaException as exc:
            err = exc.args[0] if exc.args else exc
            self._checking_topics = True
            self.consumer.poll(0)  # serves the queued client errors: the last one says why
            raise ConsumerError(
                f"cannot reach Kafka at {self.config.bootstrap} within {timeout:g} s "
                f"({err.str() if isinstance(err, KafkaError) else err}"
                f"{'; ' + self._last_error if self._last_error else ''}): check --bootstrap "
                "and --security-protocol") from exc
        if not found:
            raise ConsumerError(
                f"none of the {len(self.topics)} topics under prefix "
                f"{self.config.topic_prefix!r} exists in Kafka at {self.config.bootstrap} "
                f"(e.g. {self.topics[0]}): check --topic-prefix, and that producers have "
                "published or `rlmesh-stream topics create` has run")

    def _ends_at_start(self) -> dict[TP, int] | None:
        """Live mode: each of the topics' partitions and its end offset as reading starts
        (None: Kafka did not answer within a few seconds, and each partition starts at
        its end when assigned). A partition the sink has no offset for starts there, so
        what is published while the group forms is read; one created later holds only
        records from after the start, and is read from its first (`_start_offset`)."""
        assert self.consumer is not None
        from confluent_kafka import IsolationLevel
        from confluent_kafka.admin import AdminClient, OffsetSpec

        try:
            partitions = [TopicPartition(t, p) for t, meta in
                          _existing_topics(self.consumer, self.topics, 5.0).items()
                          for p in meta.partitions]
            if not partitions:
                return {}
            if self._admin is None:
                self._admin = AdminClient(self.config.kafka_config())
            ends = self._admin.list_offsets(  # one request per broker
                {tp: OffsetSpec.latest() for tp in partitions}, request_timeout=5.0,
                isolation_level=IsolationLevel.READ_COMMITTED)  # as the consumer reads
            return {(tp.topic, tp.partition): f.result().offset for tp, f in ends.items()}
        except Exception as exc:  # any failure: the old rule, never a crash
            log.debug("no end offsets at start (%s): partitions start at their end", exc)
            return None

    def _high_watermarks(self) -> dict[TP, int]:
        """Every partition of the topics and its high watermark now (what the consumer can
        read up to). The admin client's list_offsets answered lower ends than this for
        records already acknowledged, right after they were published: an --until-end run
        then decided on episodes it had not read whole."""
        assert self.consumer is not None
        ends: dict[TP, int] = {}
        for topic, meta in _existing_topics(self.consumer, self.topics,
                                            self.options.connect_timeout).items():
            for p in meta.partitions:
                ends[(topic, p)] = _watermarks(self.consumer, TopicPartition(topic, p))[1]
        return ends

    def _kafka_config(self) -> dict[str, Any]:
        conf = {
            **self.config.kafka_config(),
            "group.id": self.options.group_id,
            # range (eager): partition i of every topic goes to one member, so a member
            # owns whole sessions (keyed by session id, co-partitioned)
            "partition.assignment.strategy": ("range" if self.options.whole_sessions
                                              else "cooperative-sticky"),
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest" if self.options.from_beginning else "latest",
            "isolation.level": "read_committed",
            "fetch.wait.max.ms": 100,
            # 64 KiB per partition and fetch (librdkafka: 1 MiB) keeps the partitions of a
            # backlog in step, so an aligned cut (`_cut`) leaves little behind: 60 400 rows
            # for `consume episodes` over 120k events, 64 000 to 98 000 at 1 MiB, at the
            # same speed; a bigger record is still fetched whole (docs/benchmarks.md,
            # "Consumers", "Round six")
            "max.partition.fetch.bytes": 65_536,
            # once the prefetched records reach queued.min.messages (100 000: the whole
            # consumer queue, not a partition's), librdkafka stops fetching for this long
            # (default 1 s); a backlog's reader drains 100 000 records in about a second, so
            # it found its queue empty for up to that long (docs/benchmarks.md, "Round four")
            "fetch.queue.backoff.ms": 10,
            "session.timeout.ms": 10_000,
            # a topic created after the subscription (producers started after the
            # consumers) is joined within 10 s, not librdkafka's 5 minutes
            "topic.metadata.refresh.interval.ms": 10_000,
            "heartbeat.interval.ms": 1_000,
            "error_cb": self._on_kafka_error,
            # librdkafka's lines stay off the terminal (a broker that is down repeats them
            # every few ms); its errors reach `error_cb`, logged once per kind and 30 s
            "logger": LIBRDKAFKA_LOG,
        }
        if self.options.instance_id:
            conf["group.instance.id"] = self.options.instance_id
        conf.update(self.options.kafka_overrides)
        return conf

    def _on_kafka_error(self, err: KafkaError) -> None:
        """Client-level errors: wrong credentials stop the process (raised out of consume)."""
        denied = kafka_access_message(self.config, err, operation="read",
                                      group=self.options.group_id)
        if denied is not None:
            raise AccessDeniedError(denied)
        if err.fatal():
            raise KafkaException(err)
        if err.code() != KafkaError._ALL_BROKERS_DOWN or not self._last_error:
            self._last_error = err.str()  # the transport error says more than "all down"
        if self._checking_topics:
            return  # reported once, in the ConsumerError of the failed check
        # a broker that is down repeats its error every few ms: once per code and 30 s
        self._error_log.warning(log, f"consumer error: {err.str()} [{err.name()}]",
                                key=err.name())

    # -- rebalancing ----------------------------------------------------------------

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Seek every newly assigned partition to the offset stored in the sink."""
        self._between_assignments = False
        first = self._first_assigned_at is None
        if first:  # called at each rebalance, even with nothing
            self._first_assigned_at = time.monotonic()
        self._finish_checkpoint()  # the offsets it stores are the ones to load
        if first and self.options.single_member:
            self._check_single_member(partitions)
        rewound = getattr(self.sink, "rewound", None)
        if rewound is not None:  # every assigned partition is read again from the sink's
            # offsets (an eager assignment: all of them)
            rewound(sorted((tp.topic, tp.partition) for tp in partitions))
        for b in self.builders:
            self._stored[b.name] = self.sink.load_offsets(b.name)
        assign = []
        for tp in partitions:
            key = (tp.topic, tp.partition)
            start = self._start_offset(key)
            assign.append(TopicPartition(tp.topic, tp.partition, start))
            self._assigned.add(key)
            marks = None
            if self.options.until_end:  # one round trip a partition (in the rebalance
                # callback, asking from other threads at once waits for it to return)
                marks = _watermarks(consumer, tp)
                # the end seen at start, or later at assignment (never less than the
                # old rule's, the watermark at assignment)
                self._ends[key] = max(self._group_ends.get(key, 0), marks[1])
            self._set_next(key, start, marks)
        if self.options.whole_sessions:
            consumer.assign(assign)  # eager: `partitions` is the whole new assignment
        else:
            consumer.incremental_assign(assign)
        known = [tp for tp in assign if tp.offset >= 0]
        if known:  # the sink's offsets, mirrored into the group for lag tools
            try:
                consumer.commit(offsets=known, asynchronous=True)
            except KafkaException as exc:
                log.debug("kafka commit on assignment failed (harmless): %s", exc)
        log.info("assigned %s", sorted(k for k in self._assigned))

    def _check_single_member(self, partitions: list[TopicPartition]) -> None:
        """A single-writer sink's first assignment is every partition known at start, or
        another process is a member of the group: stop before reading anything. (A member
        killed without leaving is no member by then: the group waits for it to rejoin
        until its session times out, then assigns everything to this one.)"""
        got = {(tp.topic, tp.partition) for tp in partitions}
        if self._group_ends.keys() <= got and got:
            return
        raise ConsumerError(
            f"consumer group {self.options.group_id} already has a member that holds "
            f"{len(self._group_ends.keys() - got)} of the topics' partitions: this format "
            "has one writer; stop the other process, or give this one its own --group")

    def _set_next(self, key: TP, start: int, marks: tuple[int, int] | None = None) -> None:
        """Where reading `key` resumes; a logical start is resolved when --until-end needs it
        (from the partition's `marks`, its low and high offsets, when already known)."""
        if start >= 0:
            self._next[key] = start
        elif self.options.until_end and self.consumer is not None:
            low, high = marks or _watermarks(self.consumer, TopicPartition(*key))
            self._next[key] = low if start == OFFSET_BEGINNING else high
        else:
            self._next.pop(key, None)

    def _start_offset(self, key: TP) -> int:
        stored = [self._stored[b.name].get(key) for b in self._builders_of[key[0]]]
        known = [o for o in stored if o is not None]
        if known and len(known) == len(stored):
            return min(known)
        if self.options.from_beginning:
            return OFFSET_BEGINNING
        if known or self._start_ends is None:
            return min(known) if known else OFFSET_END
        # live: where the partition ended at the start; created since: all of it is new
        return self._start_ends.get(key, OFFSET_BEGINNING)

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Checkpoint what was read before the partitions go to another member."""
        self._flush(wait=True)
        self._forget(partitions)
        self._revoked()
        self._unassign(consumer, partitions)

    def _revoked(self) -> None:
        """Tell a sink that keeps state per partition that it holds none now (an eager
        revocation or a loss takes them all)."""
        if self.options.whole_sessions:
            self._between_assignments = True
            revoked = getattr(self.sink, "revoked", None)
            if revoked is not None:
                revoked()

    def _unassign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if self.options.whole_sessions:
            consumer.unassign()  # eager: every partition is revoked at once
        else:
            consumer.incremental_unassign(partitions)

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Partitions lost without a revoke: their buffered records must not be written."""
        self._finish_checkpoint()  # cut before the loss: fenced like any other
        self._drop_buffer()
        self._forget(partitions)
        if self.options.single_member:  # its session timed out (a pause, a zombie): the
            self._first_assigned_at = None  # next assignment is checked as a newcomer's
        self._revoked()
        self._rewind = True
        self._unassign(consumer, partitions)

    def _drop_buffer(self) -> None:
        """Forget what was read and not cut (read again from the stored offsets)."""
        self._buffer.clear()
        self._held = 0

    def _forget(self, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            key = (tp.topic, tp.partition)
            self._assigned.discard(key)
            self._next.pop(key, None)
            self._ends.pop(key, None)

    def _do_rewind(self) -> None:
        """Drop the buffer and go back to the sink's offsets for every assigned partition."""
        assert self.consumer is not None
        self._finish_checkpoint()
        self._drop_buffer()
        rewound = getattr(self.sink, "rewound", None)
        if rewound is not None:
            rewound(sorted(self._assigned))
        for b in self.builders:
            self._stored[b.name] = self.sink.load_offsets(b.name)
        for key in sorted(self._assigned):
            start = self._start_offset(key)
            try:
                self.consumer.seek(TopicPartition(key[0], key[1], start))
            except KafkaException as exc:  # not fetching yet: assign again at the offset
                log.debug("seek %s failed (%s); reassigning", key, exc)
                self.consumer.incremental_unassign([TopicPartition(*key)])
                self.consumer.incremental_assign([TopicPartition(key[0], key[1], start)])
            self._set_next(key, start)
        self._rewind = False

    # -- reading --------------------------------------------------------------------

    def _ingest_all(self, messages: list[Message]) -> None:
        """Buffer a consume() batch as Records: the per-record hot path.

        librdkafka hands a partition's records over in runs: what they share (assigned?
        the next offset expected, the topic's plan, the projection's reader of the last
        value header) is looked up once per run. Headers are only read for topics a
        header-reading builder takes, and a record's timestamp datetime is shared with
        the records of the same millisecond.
        """
        if not messages:
            return
        if self.first_record_at is None:
            self.first_record_at = time.monotonic()
        if self._warming is not None:  # the decoder is made there: one at a time
            self._decoding_warmed.wait()
            self._warming = None
        assigned, nxt, buffer = self._assigned, self._next, self._buffer
        append = buffer.append
        decode = self._decoder_().decode if self._any_decode else None
        stamps = self._stamps
        if len(stamps) > 4096:
            stamps.clear()
        plans, projectors = self._plans, self._projectors
        run: TP | None = None  # the partition of the run of messages being read
        message: Any  # without an error, topic(), partition() and offset() are set
        for message in messages:
            if message.error() is not None:
                self._ingest_error(message)
                continue
            topic = message.topic()
            partition = message.partition()
            if run is None or partition != run[1] or topic != run[0]:
                # a new run: what a partition's records share, looked up once per run
                run = key = (topic, partition)
                taken = key in assigned  # not: fetched before a revoke
                expected = nxt.get(key, -1)  # below it: already buffered or applied
                event_type, needs_decode, reads_headers, packer = plans[topic]
                readers, head, project = projectors[topic], _NO_HEAD, None
            offset = message.offset()
            if not taken or offset < expected:
                continue
            headers = _header_dict(message) if reads_headers else _NO_HEADERS
            ts_ms = message.timestamp()[1]
            stamp = stamps.get(ts_ms)
            if stamp is None:
                stamp = stamps[ts_ms] = timestamp_of(ts_ms)
            event = None
            value = message.value() if needs_decode else None
            if packer is not None and value:  # the packed row, straight from the payload
                if not value.startswith(head):  # another header than the run's last one's
                    head = value[:5]
                    project = readers.get(head, _UNSEEN)
                    if project is _UNSEEN:
                        project = self._projector(topic, value, packer)
                    if project is None:  # decoded whole: the next one looks again
                        head = _NO_HEAD
                if project is not None:
                    nxt[key] = offset + 1
                    try:
                        values = project(value, ts_ms)  # packed: timestamps in ms
                    except DecodeError as exc:
                        append(self._dead_letter(message, exc))
                        values = None
                    append(Record(topic, partition, offset, stamp, event_type, None, headers,
                                  values))
                    continue
            if needs_decode:
                try:
                    event = decode(value)  # type: ignore[misc,arg-type]  # None: a tombstone, named as one
                    _check_event_type(event, event_type, topic)
                except RegistryUnavailableError as exc:
                    raise _RegistryDown(str(exc)) from exc
                except RegistryProtocolError as exc:  # a wrong URL: waiting cannot help
                    raise ConsumerError(str(exc)) from exc
                except DecodeError as exc:
                    event = None
                    # dead-lettered, yet still a delivered record: header-only builders
                    # (delivery checks) see it as a Record with no event
                    append(self._dead_letter(message, exc))
            nxt[key] = offset + 1
            append(Record(topic, partition, offset, stamp, event_type, event, headers))

    def _dead_letter(self, message: Any, exc: DecodeError) -> DeadLetter:
        value = message.value()
        return DeadLetter(message.topic(), message.partition(), message.offset(),
                          f"{type(exc).__name__}: {exc}", message.key(),
                          value if isinstance(value, bytes) else None, _headers(message))

    def _projector(self, topic: str, value: bytes, projection: Projection) -> Any:
        """The generated reader of `projection` for the schema id of `value` (cached per
        header), or None: the record is decoded whole (another writer schema or format,
        another event type than the topic's, or an id that does not resolve, whose error
        the whole decode then raises and handles)."""
        decoder = self._decoder_()
        make = getattr(decoder, "projector", None)
        if make is None:
            return None
        try:
            event_type, project = make(value, list(projection.items))
        except Exception:  # the whole decode raises it again, and handles it
            return None
        if event_type is not self._event_type[topic]:
            project = None  # the whole decode names the wrong event type
        self._projectors[topic][value[:5]] = project
        return project

    def _warm_up(self) -> None:
        """On a thread while the group is joined: the decoder (serde, fastavro) and the
        projections' generated readers, which the first batch waits for, then the sink's
        staging (pyarrow), which only the first checkpoint needs. Best effort: what fails
        here is done, and reported, where it is needed."""
        try:
            if self._any_decode:
                self._decoder_()
                from rlmesh_stream.schemas.avro_reader import warm_projection

                for topic, plan in self._plans.items():
                    if plan[3] is not None:
                        warm_projection(self._event_type[topic], list(plan[3].items))
                self._warm_projectors()
        except Exception as exc:  # done again, and raised, where it is needed
            log.debug("warm-up failed: %s", exc)
        finally:
            self._decoding_warmed.set()
        try:
            self.sink.prepare()
        except Exception as exc:
            log.debug("warm-up of the sink failed: %s", exc)

    def _warm_projectors(self) -> None:
        """Each packed topic's reader for the schema id its producers most likely write
        with, its subject's latest: one GET and one compile a topic (~15 ms), otherwise
        paid when the topic's first record is read. A subject not registered yet is
        skipped; a registry that does not answer is left to the first record."""
        client = getattr(self._decoder_(), "client", None)  # a decoder passed in: none
        if client is None:
            return
        from rlmesh_stream.schemas import registry

        for topic, plan in self._plans.items():
            if plan[3] is None:
                continue
            try:
                latest = client.get_latest_version(subject_name(topic))
            except Exception as exc:
                if isinstance(exc, registry.registry_errors()) and registry.is_not_found(exc):
                    continue
                return
            if latest.schema_id is not None:
                self._projector(topic, wire.header(int(latest.schema_id)), plan[3])

    def _ingest_error(self, message: Message) -> None:
        error = message.error()
        assert error is not None
        if error.code() == KafkaError._PARTITION_EOF:
            return
        denied = kafka_access_message(self.config, error, operation="read",
                                      topic=message.topic(), group=self.options.group_id)
        if denied is not None:  # retrying cannot help: say who lacks what
            raise AccessDeniedError(denied)
        if error.fatal():
            raise KafkaException(error)
        log.warning("consumer error: %s", error)

    def _decoder_(self) -> Decoder:
        if self._decoder is None:
            from rlmesh_stream.schemas.serde import EventDecoder

            self._decoder = EventDecoder(_registry_client(self.config))
        return self._decoder

    # -- checkpoints ----------------------------------------------------------------

    def _checkpoint_due(self) -> bool:
        """`max_batch` records, or `checkpoint_interval` seconds since the last checkpoint,
        or (--until-end) every assigned partition read to its end: nothing more will come.

        While catching up on a backlog, the interval is at least four times what the
        last checkpoint took, so a slow sink spends at most a fifth of the time
        checkpointing (exactly once all the same: only how many records each holds moves).
        Under `max_batch`, no checkpoint is cut while the previous one is being written,
        except the last one of an offline run (there is nothing to read meanwhile). Near
        the end of an offline run (less than `max_batch` left to read), one is cut as soon
        as the writer is free and a fifth of `max_batch` is read: the last transaction,
        which is written after the last record is read, stays small.
        """
        n = len(self._buffer)
        if n - self._held >= self.options.max_batch:
            return True
        if not n:
            return False
        if self.options.until_end and self._read_to_end():
            return True  # nothing more to read meanwhile: the last cut waits for the writer
        if self._writer.busy:  # reading on while the last one is written
            return False
        if (self.options.until_end and n - self._held >= self.options.max_batch // 5
                and self._left_to_read() < self.options.max_batch):
            return True
        interval = self.options.checkpoint_interval
        if self._behind:
            interval = max(interval, 4 * self._flush_cost)
        return time.monotonic() - self._last_flush >= interval

    def _flush(self, final: bool = False, wait: bool = False, align: bool = False) -> None:
        """Cut a checkpoint of the buffer (every builder's rows and every offset, one
        transaction) and hand it to the writer; `final` or `wait`: until it is written.
        `align`: while a backlog is read, the cut may leave each partition's newest
        records for the next one (`_cut`).

        The cut is reduced while the writer may still be writing the checkpoint before
        it: the two hold different offsets of every partition, and only the offsets,
        which move on from where that one leaves them, wait for it to be accounted for
        (all of it waits for a sink that `reads_builder_state`).
        """
        started = self._last_flush = time.monotonic()
        if not self._buffer or self.sink.reads_builder_state:
            dropped = self._finish_checkpoint(final=final)
            if dropped or not self._buffer:
                return  # nothing to cut, or the one before was dropped: rewinding
        cut = self._cut(align and not final)
        dead = [d for d in cut if isinstance(d, DeadLetter)]
        # before the offsets move: at least once in the topic, or its refusal recorded
        try:
            refused = self.dlq.send(dead) if dead else {}
        except (DeadLetterQueueError, KafkaException) as exc:
            self._finish_checkpoint(final=final)  # the one before is good
            if final:  # an offline run must not end as if everything was applied
                raise ConsumerError(f"{exc}; the last checkpoint was not written, run again "
                                    "to resume from the one before") from exc
            # Kafka is away: nothing moves until the letters are in; read again from the
            # stored offsets (the next attempt waits for Kafka as long as `send` does)
            log.warning("checkpoint not written, the dead-letter topic did not take its "
                        "letters (%s); rewinding to the last checkpoint", exc)
            self._rewind = True
            return
        for letter_id, reason in refused.items():
            log.error("dead-letter topic %s refused %s[%d]@%d for good (%s); recorded in "
                      "dead_letters and skipped", self.dlq.topic, *letter_id, reason)
        batch, by_builder, progress = self._reduce(cut, refused, clean=not dead)
        if self._finish_checkpoint(final=final):  # one transaction at a time, in order
            return  # the one before was dropped: rewinding, this cut is read again
        self._add_offsets(batch, progress)
        self._writer.submit(batch, _Checkpoint(cut, len(dead), by_builder, progress, started))
        if final or wait:
            self._finish_checkpoint(final=final)

    def _cut(self, align: bool) -> list[Record | DeadLetter]:
        """The buffered records the next checkpoint takes; the rest stays buffered.

        All of them, unless `align` while a backlog is read with more to come and the sink
        is the slower side (the checkpoint before is still being written): then each
        partition's records up to the frontier of the partitions that lag, so the events
        of one episode, in several topics, meet in one checkpoint (aligned_cut.py). When
        the reading is the slower side, the split and the merges it moves onto the reading
        thread cost more than the upserts they save (docs/benchmarks.md, "Round six")."""
        buffer, self._buffer, self._held = self._buffer, [], 0
        if not align or not self._behind or not self._writer.busy or self._read_to_end():
            return buffer
        lags = self.lag_by_partition()
        if not lags:
            return buffer
        until = aligned_cut.frontier(aligned_cut.newest_stamps(buffer),
                                     [tp for tp, lag in lags.items() if lag > 0])
        if until is None:
            return buffer
        cut, self._buffer = aligned_cut.split(buffer, until, limit=2 * self.options.max_batch)
        self._held = len(self._buffer)
        return cut

    def _finish_checkpoint(self, block: bool = True, final: bool = False) -> bool:
        """Account for the checkpoint in flight once written (`block`: wait for it):
        stored offsets, counts, the group's offsets, `on_checkpoint`. One dropped by a
        fence rewinds (True); one that failed raises its error here."""
        written: Written[_Checkpoint] | None = self._writer.finish(block)
        if written is None:
            return False
        if written.error is not None:
            raise written.error
        if written.conflict is not None:
            log.warning("checkpoint dropped: %s", written.conflict)
            self._rewind = True
            self._drop_buffer()
            return True
        ck, batch = written.context, written.batch
        self._flush_cost = written.finished - ck.started
        for u in batch.offsets:
            self._stored[u.builder][(u.topic, u.partition)] = u.next_offset
        count = len(ck.buffer) - ck.dead  # a dead-lettered record is a Record too
        self.events += count  # every record read (dead-lettered ones included)
        self.dead_letters += ck.dead
        if self.metrics:
            self.metrics.checkpoint(ck.buffer, batch.rows, time.monotonic() - ck.started)
        self._commit_to_kafka(ck.progress, wait=final)
        if self.on_checkpoint:
            self.on_checkpoint(CheckpointInfo(count - ck.dead, written.committed_at,
                                              ck.by_builder))
        return False

    def _reduce(self, cut: list[Record | DeadLetter], refused: dict[LetterId, str],
                clean: bool = False
                ) -> tuple[SinkBatch, dict[str, list[Record]], dict[TP, int]]:
        """A cut's rows (each builder's records it has not stored yet, reduced) and dead
        letters as a batch without offsets, the records by builder, and the offset after
        the cut in each partition.

        Reading the stored offsets before the checkpoint in flight is accounted for
        filters alike: that checkpoint ends where the cut begins, in every partition.
        `clean`: the cut holds no dead letter (only Records)."""
        batch = SinkBatch(group_id=self.options.group_id)
        first, progress = _offset_ranges(cut)
        by_builder: dict[str, list[Record]] = {}
        prefix = self.config.topic_prefix
        shared = self.sink.shared_writers
        for b in self.builders:
            stored = self._stored[b.name]
            topics = set(b.topics_of(prefix))
            if all(t in topics and stored.get((t, p), -1) <= o for (t, p), o in first.items()):
                # all of it (a backlog's case)
                mine = cast(list[Record], cut) if clean else [
                    r for r in cut if type(r) is Record]
            else:
                mine = [r for r in cut if type(r) is Record and r.topic in topics
                        and r.offset >= stored.get((r.topic, r.partition), -1)]
            by_builder[b.name] = mine
            reduced: Reduced = reduce(b, mine)
            for table in b.tables:
                batch.rows[table] = reduced.sorted_rows(table)
            batch.after_sql.extend(b.after_sql)
            if shared:
                batch.locks.extend(b.lock_keys(reduced))
        for d in cut:
            if isinstance(d, DeadLetter):
                names = ",".join(b.name for b in self._builders_of[d.topic])
                why = refused.get(d.id)
                if why is None:
                    batch.add_dead_letter(names, d.topic, d.partition, d.offset, d.error,
                                          self.dlq.topic)
                else:
                    batch.add_dead_letter(names, d.topic, d.partition, d.offset,
                                          f"{d.error}; not copied to the dead-letter topic "
                                          f"{self.dlq.topic}, which refused it: {why}", None)
        return batch, by_builder, progress

    def _add_offsets(self, batch: SinkBatch, progress: dict[TP, int]) -> None:
        """Each builder's offsets, from its stored ones to the cut's end (the fence)."""
        for b in self.builders:
            stored = self._stored[b.name]
            for key, nxt in sorted(progress.items()):
                if b not in self._builders_of[key[0]]:
                    continue
                old = stored.get(key)
                if old is None or nxt > old:
                    batch.offsets.append(OffsetUpdate(b.name, key[0], key[1], old, nxt))

    def _commit_to_kafka(self, progress: dict[TP, int], wait: bool = False) -> None:
        """Mirror the sink's offsets into the group, for lag tools only."""
        assert self.consumer is not None
        offsets = [TopicPartition(t, p, o) for (t, p), o in progress.items()
                   if (t, p) in self._assigned]
        if offsets:
            try:
                if wait:
                    self.consumer.commit(offsets=offsets, asynchronous=False)
                else:
                    self.consumer.commit(offsets=offsets, asynchronous=True)
            except KafkaException as exc:
                log.debug("kafka commit failed (harmless, the sink has the offsets): %s", exc)

    # -- offline mode and progress ---------------------------------------------------

    def _at_end(self) -> bool:
        """Every assigned partition has reached the end offset seen at assignment, and
        every record read is cut into a checkpoint (the last one is waited for)."""
        return not self._buffer and self._read_to_end()

    def _read_to_end(self) -> bool:
        """Every assigned partition read up to the end offset seen at assignment; with
        `whole_sessions`, every partition of the group up to its end at start."""
        if self.options.whole_sessions and self._group_ends:
            return self._group_read_to_end()
        if not self._assigned:
            return False
        return all(self._next.get(k, -1) >= self._ends.get(k, 0) for k in self._assigned)

    def _group_read_to_end(self) -> bool:
        """Every partition of the topics read to its end at start: by this process (the
        ones it holds), or, as the sink's stored offsets say, by other members (none for
        a single member). A member holding no partition ends once the others are done."""
        if self._between_assignments or not all(
                self._next.get(k, -1) >= self._ends.get(k, 0) for k in self._assigned):
            return False
        others = [k for k in self._group_ends if k not in self._assigned]
        if not others:
            return bool(self._assigned) or not self._group_ends
        group_offsets = getattr(self.sink, "group_offsets", None)
        if self.options.single_member or group_offsets is None or self._writer.busy:
            return False
        now = time.monotonic()
        if now - self._idle_checked_at < 1.0:  # ask the sink once a second at most
            return False
        self._idle_checked_at = now
        stored = group_offsets()
        return all(stored.get(k, -1) >= self._group_ends[k] for k in others)

    def _left_to_read(self) -> int:
        """Records left up to the end offsets seen at assignment (--until-end)."""
        return sum(max(0, end - self._next.get(key, 0)) for key, end in self._ends.items()
                   if key in self._assigned)

    def _settle_time(self) -> float:
        if self.options.settle_time is not None:
            return self.options.settle_time
        return 3 * int(self._kafka_config()["session.timeout.ms"]) / 1000

    def _idle_and_settled(self) -> bool:
        """--until-end in a process that holds no partitions: stop once the group has
        settled (`settle_time` after the first assignment) with every partition of the
        topics owned by another member. There is nothing left for this process to read."""
        if (self._assigned or self._buffer or self._first_assigned_at is None
                or self.options.whole_sessions):  # there, `_read_to_end` says it
            return False
        now = time.monotonic()
        if now - self._first_assigned_at < self._settle_time():
            return False
        if now - self._idle_checked_at < 1.0:  # look at the group once a second at most
            return False
        self._idle_checked_at = now
        owners = self._partition_owners()
        if owners is None:
            return False
        log.warning("holding no partitions %.0fs after joining group %s: all %d partitions "
                    "of its topics are owned by %d other member(s); nothing to read, stopping",
                    now - self._first_assigned_at, self.options.group_id, len(owners),
                    len(set(owners.values())))
        return True

    def _partition_owners(self) -> dict[TP, str] | None:
        """The owning member of every partition of the topics, or None while any partition
        is unowned, owned by this process, unknown, or the group cannot be described."""
        assert self.consumer is not None
        from confluent_kafka.admin import AdminClient

        try:
            metadata = _existing_topics(self.consumer, self.topics, timeout=10)
            wanted: set[TP] = set()
            for topic in self.topics:
                meta = metadata.get(topic)
                if meta is None or meta.error is not None or not meta.partitions:
                    return None
                wanted |= {(topic, p) for p in meta.partitions}
            if self._admin is None:
                self._admin = AdminClient(self.config.kafka_config())
            admin = self._admin
            group = self.options.group_id
            described = admin.describe_consumer_groups([group], request_timeout=10)[group]
            members = described.result(timeout=15).members
        except Exception as exc:  # the group or metadata cannot be read now: look again later
            log.debug("cannot describe group %s (%s)", self.options.group_id, exc)
            return None
        me = self.consumer.memberid()
        owners: dict[TP, str] = {}
        for member in members:
            if member.member_id == me:
                continue
            assignment = member.assignment.topic_partitions if member.assignment else []
            for tp in assignment:
                owners[(tp.topic, tp.partition)] = member.member_id
        if not wanted <= owners.keys():
            return None
        return {tp: owners[tp] for tp in wanted}

    def _lag(self) -> int | None:
        lags = self.lag_by_partition()
        return None if lags is None else sum(lags.values())

    def lag_by_partition(self) -> dict[TP, int] | None:
        """Records behind the end offset, per assigned partition; None when unknown."""
        if self.consumer is None or not self._assigned:
            return None
        lags: dict[TP, int] = {}
        for key in self._assigned:
            try:
                _, high = self.consumer.get_watermark_offsets(TopicPartition(*key), cached=True)
            except KafkaException:
                return None
            high = max(high, self._ends.get(key, -1))
            if high < 0:
                return None
            lags[key] = max(0, high - self._next.get(key, high))
        return lags


_RETRIABLE_METADATA = {
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError._UNKNOWN_PARTITION,  # the client's own metadata lags during a broker stall
    KafkaError._TIMED_OUT,
    KafkaError._TRANSPORT,
}


def _existing_topics(consumer: Consumer, topics: list[str], timeout: float) -> dict[str, Any]:
    """The metadata of those of `topics` that exist, asked for topic by topic (a consumer
    never creates a topic by asking): the whole cluster's metadata, every topic of every
    team, took 130 to 200 ms to fetch and parse with 10 000 topics."""
    found: dict[str, Any] = {}
    for topic in topics:
        meta = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
        # absent from the whole listing: unknown, or not ours to see (as the listing does)
        if meta is not None and (meta.error is None or meta.error.code() not in (
                KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.TOPIC_AUTHORIZATION_FAILED)):
            found[topic] = meta
    return found


def _offset_ranges(cut: list[Record | DeadLetter]) -> tuple[dict[TP, int], dict[TP, int]]:
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


def _watermarks(
    consumer: Consumer, tp: TopicPartition, deadline_s: float = 60.0
) -> tuple[int, int]:
    """A partition's (low, high) offsets, retried while leadership settles.

    Right after a topic is created, or while a leader moves, the broker answers
    NOT_LEADER / LEADER_NOT_AVAILABLE for a moment; during a broker stall (or right after
    partitions are added) the client's own metadata may not know the partition
    (_UNKNOWN_PARTITION) until it is refreshed. That is a wait, not a failure.
    """
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            low, high = consumer.get_watermark_offsets(tp, timeout=10)
            return int(low), int(high)
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            code = err.code() if isinstance(err, KafkaError) else None
            if code not in _RETRIABLE_METADATA or time.monotonic() > deadline:
                raise
            log.info("waiting for %s[%d]'s leader: %s", tp.topic, tp.partition, err)
            time.sleep(0.5)
            if code == KafkaError._UNKNOWN_PARTITION:  # the client's metadata is behind
                with contextlib.suppress(KafkaException):
                    consumer.list_topics(tp.topic, timeout=5)  # refreshes it


def _registry_client(config: StreamConfig) -> Any:
    """What fetches writer schemas: `registry_http.SchemaFetcher` (two GETs, no HTTP
    stack to import) unless a setting needs the confluent client."""
    from rlmesh_stream.schemas.registry_http import SUPPORTED, SchemaFetcher

    conf = config.registry_config()
    if set(conf) <= SUPPORTED:
        return SchemaFetcher(conf)
    from confluent_kafka.schema_registry import SchemaRegistryClient

    return SchemaRegistryClient(conf)


def _check_event_type(event: Any, expected: EventType, topic: str) -> None:
    """A valid event of another type than its topic's is a bad record, not a silent skip."""
    if type(event) is not expected.event_class:
        raise WrongEventTypeError(
            f"{topic} carries {expected.value} events, this record holds "
            f"{EventType.of(event).value}")


def _header_dict(message: Message) -> dict[str, bytes]:
    """A message's headers by name (None values left out; str values as bytes)."""
    raw = message.headers()
    if not raw:
        return {}
    headers: dict[str, Any] = dict(raw)  # bytes or None values; a later name wins
    if None in headers.values() or len(headers) != len(raw):
        # a None value, or a repeated name: the last non-None value of each name
        pairs = raw.items() if isinstance(raw, dict) else raw
        headers = {k: v for k, v in pairs if v is not None}
    if str in map(type, headers.values()):
        return {k: v.encode() if isinstance(v, str) else v for k, v in headers.items()}
    return headers


def _headers(message: Message) -> list[tuple[str, bytes | None]]:
    """A message's headers as (name, bytes) pairs (the producer writes bytes)."""
    raw = message.headers() or []
    pairs = list(raw.items()) if isinstance(raw, dict) else raw
    out: list[tuple[str, bytes | None]] = []
    for name, value in pairs:
        out.append((name, value.encode() if isinstance(value, str) else value))
    return out

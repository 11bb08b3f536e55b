"""`export trajectories` on the consumers' runtime: the dataset is the sink.

The runtime (`consumers.runtime.ConsumerRuntime`) reads, decodes, dead-letters
and checkpoints as for every table builder. Two builders ride on it:
`TrajectoryBuilder` feeds the decoded step, action, observation, episode and
session events to the joiner; `CertificateBuilder` reads every event topic's
headers for the delivery check (producer id + sequence). Their `rows` write no
table rows: `DatasetSink.apply`, called once per checkpoint with the batch's
offsets, releases the whole episodes, has the writer append them and commits
the manifest (offsets, joiner state, certificate) atomically. On restart the
runtime seeks to the manifest's offsets and the joiner resumes from its
state (JSON, state.py), so every record is applied exactly once.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar, cast

from rlmesh_stream.consumers.builders.base import Builder, PartialRow
from rlmesh_stream.consumers.datasets import state
from rlmesh_stream.consumers.datasets.episodes import Episode, Filters, Joiner
from rlmesh_stream.consumers.datasets.iceberg import IcebergTarget, IcebergWriter
from rlmesh_stream.consumers.datasets.manifest import (
    Certificate,
    DatasetError,
    ManifestStore,
    header_sequence,
)
from rlmesh_stream.consumers.datasets.writers import MinariWriter, ParquetWriter
from rlmesh_stream.consumers.progress import Progress
from rlmesh_stream.consumers.records import Record
from rlmesh_stream.consumers.runtime import ConsumerRuntime, RuntimeOptions
from rlmesh_stream.consumers.sinks import Sink, SinkBatch
from rlmesh_stream.consumers.tables import Table
from rlmesh_stream.schemas.config import StreamConfig
from rlmesh_stream.schemas.topics import EventType

TRAJECTORY_EVENTS = frozenset({
    EventType.OBSERVATION_EMITTED, EventType.ACTION_RECEIVED, EventType.STEP_COMPLETED,
    EventType.EPISODE_STARTED, EventType.EPISODE_COMPLETED, EventType.SESSION_ENDED,
    EventType.SESSION_FAILED, EventType.RELAY_ADVISORY,
})


class TrajectoryBuilder(Builder):
    name = "trajectories"
    event_types: ClassVar[frozenset[EventType]] = TRAJECTORY_EVENTS
    tables: ClassVar[tuple[Table, ...]] = ()

    def __init__(self, sink: DatasetSink) -> None:
        self.sink = sink

    def rows(self, record: Record) -> Iterator[PartialRow]:
        if record.event is not None:
            self.sink.joiner_for(record.partition).add(
                record.event, (record.topic, record.partition, record.offset))
        return iter(())


class CertificateBuilder(Builder):
    name = "certificate"
    event_types: ClassVar[frozenset[EventType]] = frozenset(EventType)
    tables: ClassVar[tuple[Table, ...]] = ()
    needs_decode = False

    def __init__(self, sink: DatasetSink) -> None:
        self.sink = sink

    def rows(self, record: Record) -> Iterator[PartialRow]:
        certificate = self.sink.certificate_for(record.partition)
        certificate.covered(record.topic, record.partition, record.offset)
        seen = header_sequence(record.headers)
        if seen is not None:
            dead = record.event is None and record.event_type in TRAJECTORY_EVENTS
            certificate.saw(seen[0], seen[1], dead)
        return iter(())


@dataclass
class ExportOptions:
    out: Path | None  # the directory (minari, parquet)
    fmt: str  # minari | parquet | iceberg
    dataset_id: str  # the Minari id; for iceberg, the table
    filters: Filters
    iceberg: IcebergTarget | None = None
    group: str = ""  # the consumer group (iceberg: the one that writes the table)


class DatasetSink:
    """What the runtime calls a sink: offsets from the manifest, one commit per checkpoint.

    Only `load_offsets` and `apply` are called by the runtime; a dataset has no SQL.
    """

    shared_writers = False  # one process exports a dataset: no lock keys
    reads_builder_state = True  # the builders feed the joiner and certificate `apply` reads

    def __init__(self, options: ExportOptions, prefix: str) -> None:
        self.options = options
        self.prefix = prefix
        self.final = False
        self.released: list[Episode] = []
        self._load()

    def _load(self) -> None:
        options = self.options
        assert options.out is not None
        self.store = ManifestStore(options.out, fmt=options.fmt, dataset_id=options.dataset_id)
        self._restore()

    def _restore(self) -> None:
        """Writer, joiner and certificate as the store's committed generation left them."""
        options = self.options
        store = self.store
        self.writer: MinariWriter | ParquetWriter | IcebergWriter
        if options.fmt == "minari":
            self.writer = MinariWriter(store.root, options.dataset_id)
        else:
            self.writer = ParquetWriter(store.root)
        self.writer.recover(self.store.committed.writer, self.store.committed.generation)
        self.joiner = Joiner(options.filters)
        self.certificate = Certificate()
        if self.store.pending_state is not None:
            restored = state.load(self.store.pending_state, str(store.state_dir))
            self.certificate = restored.pop("certificate")
            self.joiner.restore(restored, self.store.offsets(CertificateBuilder.name))

    def rewound(self, partitions: list[tuple[str, int]] | None = None) -> None:
        """The runtime reads every assigned partition again from the stored offsets (an
        assignment, a lost partition, a rewind): forget what was read since the last
        commit, or re-read records would join a second time (a vector session's group
        steps counted twice, released episodes read again as partial ones)."""
        self._restore()

    def joiner_for(self, partition: int) -> Joiner:
        return self.joiner

    def certificate_for(self, partition: int) -> Certificate:
        return self.certificate

    def certificate_summary(self) -> dict[str, Any]:
        return dict(self.store.committed.certificate)

    def load_offsets(self, builder: str) -> dict[tuple[str, int], int]:
        return self.store.offsets(builder)

    def apply(self, batch: SinkBatch) -> None:
        try:
            self._commit(batch)
        except Exception:
            self._reload()  # the joiner saw this batch: go back to the committed state
            raise

    def _commit(self, batch: SinkBatch) -> None:
        # One exporter per directory (the manifest's lock): no fencing between writers.
        self.certificate.merge()
        episodes = self.joiner.release(final=self.final)
        keep = []
        for e in episodes:
            why = (None if isinstance(self.writer, ParquetWriter)
                   else self.writer.accepts(e))
            if why is not None:
                self.joiner.skipped[why] += 1
                self.joiner.skip_examples.setdefault(why, f"{e.session_id}/{e.record_id}")
                continue
            keep.append(e)
            self.certificate.exported += 1
            self.certificate.exported_steps += e.length
            self.certificate.tagged_caution += e.caution
            self.certificate.without_terminal_observation += not e.terminal_observation
            self.certificate.abandoned_exported += e.abandoned
        generation = self.store.committed.generation + 1
        writer_state = self.writer.write(keep, generation) if keep else (
            self.store.committed.writer)
        read = self.store.offsets(CertificateBuilder.name)
        for u in batch.offsets:
            if u.builder == CertificateBuilder.name:
                read[(u.topic, u.partition)] = u.next_offset
        trajectory_topics = {et.topic(self.prefix) for et in TRAJECTORY_EVENTS}
        resume = self.joiner.resume_offsets(
            {tp: o for tp, o in read.items() if tp[0] in trajectory_topics})
        self.store.commit(offsets={CertificateBuilder.name: read, TrajectoryBuilder.name: resume},
                          writer=writer_state,
                          joiner_state=state.dump(self.joiner.state(), self.certificate),
                          certificate=self.certificate.summary(self.joiner.skipped))
        self.released.extend(keep)

    def finish(self) -> None:
        """The end of an offline run: decide on every episode still pending, and commit."""
        self.final = True
        self._commit(SinkBatch())

    def _reload(self) -> None:
        self.store.close()
        self._load()

    def close(self) -> None:
        self.store.close()


def make_export(config: StreamConfig, options: ExportOptions, runtime_options: RuntimeOptions,
                *, progress: Progress | None = None) -> tuple[DatasetSink, ConsumerRuntime]:
    """The dataset sink and the consumer runtime feeding it (not started: `runtime.run()`).

    A member owns whole sessions (a range assignment over co-partitioned topics); the
    single-writer formats (a Parquet directory, a Minari dataset) take one member only."""
    sink: DatasetSink
    if options.iceberg is not None:  # several members: shards of a table
        from rlmesh_stream.consumers.datasets.iceberg_sink import ShardedSink

        check_co_partitioned(config, list(EventType))
        runtime_options = replace(runtime_options, whole_sessions=True, single_member=False)
        sink = ShardedSink(options, config.topic_prefix)
    else:
        check_co_partitioned(config, sorted(TRAJECTORY_EVENTS, key=lambda e: e.value))
        runtime_options = replace(runtime_options, whole_sessions=True, single_member=True)
        sink = DatasetSink(options, config.topic_prefix)
    builders: list[Builder] = [TrajectoryBuilder(sink), CertificateBuilder(sink)]
    return sink, ConsumerRuntime(config, builders, cast(Sink, sink), runtime_options,
                                 progress=progress)


def run_export(config: StreamConfig, options: ExportOptions, runtime_options: RuntimeOptions,
               *, progress: Progress | None = None) -> tuple[DatasetSink, ConsumerRuntime]:
    """Export until stopped (or, with `until_end`, until the end seen at start)."""
    sink, runtime = make_export(config, options, runtime_options, progress=progress)
    try:
        runtime.run()
        if runtime_options.until_end:
            sink.finish()
        elif options.iceberg is not None:
            sink.finish()  # the summary only: a live run decides nothing at its end
    finally:
        sink.close()
    return sink, runtime


def check_co_partitioned(config: StreamConfig, events: list[EventType],
                         timeout: float = 15.0) -> None:
    """The topics of `events` that exist have one partition count, or a DatasetError:
    a session's events are in partition i of each (keyed by session id), and a member
    owns a session only if it owns partition i of every one of them."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({**config.kafka_config(), "log_level": 3})
    counts: dict[str, int] = {}
    kind = "trajectory" if len(events) == len(TRAJECTORY_EVENTS) else "event"
    for et in events:
        topic = et.topic(config.topic_prefix)
        try:
            meta = admin.list_topics(topic=topic, timeout=timeout).topics.get(topic)
        except Exception:  # Kafka away: the runtime's own check says so, in one line
            return
        if meta is not None and meta.error is None and meta.partitions:
            counts[topic] = len(meta.partitions)
    if len(set(counts.values())) <= 1:
        return
    common = Counter(counts.values()).most_common(1)[0][0]
    odd = ", ".join(f"{t} has {n}" for t, n in sorted(counts.items()) if n != common)
    others = sum(n == common for n in counts.values())
    raise DatasetError(f"the {kind} topics must have the same number of partitions (a "
                       f"session's events are in partition i of each): {odd}, the other "
                       f"{others} have {common}; recreate them with one count")


def default_group(dataset_id: str, out: str) -> str:
    """The group of an export that names none: one per dataset and destination, so two
    exports of one dataset into different places never split its partitions."""
    digest = hashlib.sha256(out.encode()).hexdigest()[:12]
    return f"rlmesh-stream.export.{dataset_id}.{digest}"


_DATASET_ID = re.compile(r"^(?:[A-Za-z0-9_.-]+/)+[A-Za-z0-9_.-]+-v\d+$")


def check_dataset_id(dataset_id: str) -> str:
    """NAMESPACE/NAME-vN (Minari's syntax), or a clear DatasetError."""
    if not _DATASET_ID.match(dataset_id):
        raise DatasetError(f"dataset id {dataset_id!r} is not NAMESPACE/NAME-vN "
                           "(for example rlmesh/cartpole-v0)")
    return dataset_id


__all__ = ["DatasetError", "DatasetSink", "ExportOptions", "make_export", "run_export"]

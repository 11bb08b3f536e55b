"""The dataset as the runtime's sink: `DatasetSink` and the two builders that feed it.

The runtime (`consumers.runtime.ConsumerRuntime`) reads, decodes, dead-letters
and checkpoints as for every table builder. Two builders ride on it:
`TrajectoryBuilder` feeds the decoded step, action, observation, episode and
session events to the joiner; `CertificateBuilder` reads every event topic's
headers for the delivery check (producer id + sequence). Their `rows` write no
table rows: `DatasetSink.apply`, called once per checkpoint with the batch's
offsets, releases the whole episodes, has the writer append them and commits
the manifest (offsets, joiner state, certificate) atomically, the state's changes
journaled (manifest.py). On restart the runtime seeks to the manifest's offsets and
the joiner resumes from its state (JSON, state.py), so every record is applied
exactly once.

Apart from `export.py` (which composes a run) so that the Iceberg sink
(`iceberg_sink.py`), which `export.py` picks, can build on `DatasetSink` without an
import circle.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from rlmesh_stream.consumers.builders.base import Builder, PartialRow
from rlmesh_stream.consumers.datasets import DEFAULT_MAX_HELD_STEPS, state
from rlmesh_stream.consumers.datasets.certificate import (
    Certificate,
    header_sequence,
    skipped_episodes,
)
from rlmesh_stream.consumers.datasets.episodes import Episode, Filters, Joiner, plan_of
from rlmesh_stream.consumers.datasets.iceberg import IcebergTarget
from rlmesh_stream.consumers.datasets.manifest import DatasetError, ManifestStore
from rlmesh_stream.consumers.datasets.minari_writer import MinariWriter
from rlmesh_stream.consumers.datasets.packed import ITEMS
from rlmesh_stream.consumers.datasets.per_env import (
    ENV_FIELD,
    MinariDatasets,
    dataset_id_for,
    one_env,
)
from rlmesh_stream.consumers.datasets.writers import ParquetWriter
from rlmesh_stream.consumers.runtime.records import TP, Record
from rlmesh_stream.consumers.runtime.redelivery import Seen
from rlmesh_stream.consumers.sinks import Sink, SinkBatch
from rlmesh_stream.consumers.table_model import Table
from rlmesh_stream.schemas.cli_values import STATE_DIR
from rlmesh_stream.schemas.codec.projection_items import Item
from rlmesh_stream.schemas.contract.topics import EventType

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
        self.checks_keys = sink.joins_per_partition

    def packed_items(self, event_type: EventType) -> tuple[Item, ...] | None:
        """What the joiner reads of each event (`packed.ITEMS`), read straight from the
        payloads: no event dataclass, no object per lane."""
        return ITEMS.get(event_type)

    def rows(self, record: Record) -> Iterator[PartialRow]:
        self.take((record,))
        return iter(())

    def take(self, records: Iterable[Record]) -> None:
        """`rows` for a whole batch (what `reduce` calls): the joiner looked up once per
        run of a partition's records, no generator per record. A record decoded whole
        (another writer schema) is packed here; a dead-lettered one has neither."""
        joiner_for, partition, joiner = self.sink.joiner_for, None, None
        last_type, plan = None, None
        for record in records:
            values = record.values
            if values is None and record.event is None:
                continue
            if record.partition != partition or joiner is None:
                partition, joiner = record.partition, joiner_for(record.partition)
            where = (record.topic, record.partition, record.offset)
            if values is None:
                joiner.add(record.event, where)
                continue
            if record.event_type is not last_type or plan is None:
                # records come in runs of one type: an enum's hash is a Python call
                last_type, plan = record.event_type, plan_of(record.event_type)
            joiner.add_planned(plan, values, where)


class CertificateBuilder(Builder):
    name = "certificate"
    event_types: ClassVar[frozenset[EventType]] = frozenset(EventType)
    tables: ClassVar[tuple[Table, ...]] = ()
    needs_decode = False
    drops_duplicates = False  # the certificate counts them

    def __init__(self, sink: DatasetSink) -> None:
        self.sink = sink

    def rows(self, record: Record) -> Iterator[PartialRow]:
        self.take((record,))
        return iter(())

    def take(self, records: Iterable[Record]) -> None:
        """`rows` for a whole batch: the certificate looked up once per run of a
        partition's records."""
        certificate_for = self.sink.certificate_for
        certificate: Certificate | None = None
        topic, partition, low, high = "", -1, 0, 0  # the run of one partition's records
        for record in records:
            if record.partition != partition or record.topic != topic or certificate is None:
                if certificate is not None:
                    certificate.covered(topic, partition, low)
                    certificate.covered(topic, partition, high)
                topic, partition = record.topic, record.partition
                low = high = record.offset
                certificate = certificate_for(partition)
            offset = record.offset
            if offset < low:
                low = offset
            elif offset > high:
                high = offset
            seen = header_sequence(record.headers)
            if seen is not None:
                dead = (record.event is None and record.values is None
                        and record.event_type in TRAJECTORY_EVENTS)
                certificate.saw(seen[0], seen[1], dead)
        if certificate is not None:
            certificate.covered(topic, partition, low)
            certificate.covered(topic, partition, high)


@dataclass
class ExportOptions:
    out: Path | None  # the directory (minari, parquet)
    fmt: str  # minari | parquet | iceberg
    dataset_id: str  # the Minari id; for iceberg, the table
    filters: Filters
    minari_format: str = "hdf5"  # hdf5 | arrow (Minari's storage layouts)
    max_episode_steps: int | None = None  # overrides the env spec's step limit
    max_held_steps: int = DEFAULT_MAX_HELD_STEPS  # the joiner's memory bound (episodes.py)
    trust_env_spec: bool = False  # take producers' env specs unchecked (env_spec.py)
    iceberg: IcebergTarget | None = None
    group: str = ""  # the consumer group (iceberg: the one that writes the table)
    # Minari's dataset metadata the user set: author, author_email, code_permalink,
    # algorithm_name, description, ref_min_score, ref_max_score
    minari_metadata: dict[str, Any] = field(default_factory=dict)


class DatasetSink(Sink):
    """A dataset as the runtime's sink: offsets from the manifest, one commit per
    checkpoint; it keeps the joiner's state between checkpoints (`rewound`). No SQL."""

    shared_writers = False  # one process exports a dataset: no lock keys
    # one joiner per partition (a shard of whole sessions), not one for the dataset: a
    # record must then sit in its session's partition, so be keyed by its session id
    joins_per_partition = False
    reads_builder_state = True  # the builders feed the joiner and certificate `apply` reads

    def __init__(self, options: ExportOptions, prefix: str) -> None:
        if options.iceberg is None:  # a directory format's (a table's name is checked apart)
            check_dataset_id(options.dataset_id, options.out)
        self.options = options
        self.prefix = prefix
        self.final = False
        self.released: list[Episode] = []
        # what this run's committed checkpoints exported and skipped (the progress line)
        self.run_counts = Counter[str]()
        self._load()

    def _load(self) -> None:
        options = self.options
        assert options.out is not None
        if options.fmt == "parquet" and not (options.out / STATE_DIR).exists():
            # no export ever wrote here, yet it holds files named like its data: another
            # dataset (copied without its state, or the state removed), which the
            # recovery of a first commit would delete
            foreign = ParquetWriter.parts(options.out)
            if foreign:
                raise DatasetError(f"{options.out} holds Parquet files no export state "
                                   f"accounts for (e.g. {foreign[0].relative_to(options.out)}"
                                   "): choose another --out (an export writes only into a "
                                   "new folder or one it wrote)")
        self.store = ManifestStore(options.out, fmt=options.fmt, dataset_id=options.dataset_id)
        self._restore()

    def _restore(self) -> None:
        """Writer, joiner and certificate as the store's committed generation left them."""
        options = self.options
        store = self.store
        self.writer: MinariWriter | MinariDatasets | ParquetWriter
        if options.fmt == "minari":
            minari_options: dict[str, Any] = {
                "data_format": options.minari_format, "state_dir": store.state_dir,
                "max_episode_steps": options.max_episode_steps,
                "trust_env_spec": options.trust_env_spec,
                "metadata": options.minari_metadata}
            if ENV_FIELD in options.dataset_id:  # one dataset per env
                self.writer = MinariDatasets(store.root, options.dataset_id, **minari_options)
            else:
                self.writer = MinariWriter(store.root, options.dataset_id, **minari_options)
        else:
            self.writer = ParquetWriter(store.root)
        self.writer.recover(self.store.committed.writer, self.store.committed.generation)
        self.joiner = Joiner(options.filters, options.max_held_steps)
        self.certificate = Certificate()
        # per "topic|partition", what tells re-delivered records apart (redelivery.py):
        # the trajectories' states as of the certificate's offsets, stored with them
        self.seen: dict[str, Any] = {}
        base, lines = store.read_state()
        committed = state.replay(base, lines, str(store.state_dir))
        if committed is not None:
            self.seen = dict(committed.get("seen", {}))
            restored = state.load(committed, str(store.state_dir))
            self.certificate = restored.pop("certificate")
            self.joiner.restore(restored, self.store.offsets(CertificateBuilder.name))
            # manifest.json holds the certificate without its producers (the state has
            # their ranges): the committed certificate whole again
            store.committed.certificate.setdefault(
                "producers", self.certificate.summary({})["producers"])
        self.changes = state.Changes(committed)

    def rewound(self, partitions: list[TP] | None = None) -> None:
        """The runtime reads every assigned partition again from the stored offsets (an
        assignment, a lost partition, a rewind): forget what was read since the last
        commit, or re-read records would join a second time (a vector session's group
        steps counted twice, released episodes read again as partial ones)."""
        self._restore()

    def joiner_for(self, partition: int) -> Joiner:
        return self.joiner

    def certificate_for(self, partition: int) -> Certificate:
        return self.certificate

    def dataset_ids(self) -> list[str]:
        """The Minari datasets this export wrote (one per env for a `{env}` id)."""
        if isinstance(self.writer, MinariDatasets):
            return self.writer.dataset_ids()
        return [self.options.dataset_id] if self.options.fmt == "minari" else []

    def certificate_summary(self) -> dict[str, Any]:
        return dict(self.store.committed.certificate)

    def load_offsets(self, builder: str) -> dict[TP, int]:
        return self.store.offsets(builder)

    def load_seen(self, builder: str) -> dict[tuple[str, int], Seen]:
        """The committed re-delivery states of `builder`'s partitions (the trajectories':
        the certificate counts duplicates, it drops none)."""
        if builder != TrajectoryBuilder.name:
            return {}
        return seen_states(self.seen, str(self.store.state_dir))

    def apply(self, batch: SinkBatch) -> None:
        try:
            self._commit(batch)
        except Exception:
            self._reload()  # the joiner saw this batch: go back to the committed state
            raise

    def _commit(self, batch: SinkBatch) -> None:
        # One exporter per directory (the manifest's lock): no fencing between writers.
        self.certificate.merge()
        skipped = skipped_episodes(self.joiner.skipped)
        episodes = self.joiner.release(final=self.final)
        if isinstance(self.writer, MinariWriter):  # a dataset id without {env}: one env
            one_env(self.options.dataset_id, self.writer.env_episodes, episodes)
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
        seen_before = self.seen
        self.seen = updated_seen(seen_before, batch, resume)
        certificate = self.certificate.summary(self.joiner.skipped)
        if isinstance(self.writer, (MinariWriter, MinariDatasets)):
            # where the dataset's env spec came from: "producer" (the env as it ran),
            # "registry default" (Gymnasium's registration: nobody said), "none"
            certificate["env_spec"] = self.writer.env_spec_source or None
            # producers' specs not taken (env_spec.py): their episodes kept, the spec not
            certificate["env_specs_dropped"] = dict(self.writer.specs_dropped)
            if self.writer.spec_dropped_example:
                certificate["env_spec_dropped_example"] = self.writer.spec_dropped_example
        # the state's changes journaled; written whole at the end of an offline run (the
        # directory at rest holds it in one file) or when the journal has grown
        self.store.commit(offsets={CertificateBuilder.name: read, TrajectoryBuilder.name: resume},
                          writer=writer_state, certificate=certificate,
                          changes=self.changes.line(self.joiner, self.certificate,
                                                    seen_before, self.seen),
                          whole=lambda: {**state.dump(self.joiner.state(), self.certificate),
                                         "seen": self.seen},
                          compact=self.final)
        self.released.extend(keep)
        self.counted(keep, skipped_episodes(self.joiner.skipped) - skipped)

    def counted(self, exported: list[Episode], skipped: int) -> None:
        """A committed checkpoint's episodes, for the progress line."""
        self.run_counts.update(episodes=len(exported), steps=sum(e.length for e in exported),
                               skipped=skipped)

    def progress_text(self) -> str:
        """What this run's committed checkpoints exported and skipped, in episodes."""
        n = self.run_counts
        text = (f"exported {n['episodes']} episode{'' if n['episodes'] == 1 else 's'} "
                f"({n['steps']} steps)")
        return text + (f", skipped {n['skipped']}" if n["skipped"] else "")

    def finish(self) -> None:
        """The end of an offline run: decide on every episode still pending, and commit."""
        self.final = True
        self._commit(SinkBatch())

    def _reload(self) -> None:
        self.store.close()
        self._load()

    def close(self) -> None:
        self.store.close()


def seen_states(values: dict[str, Any], source: str) -> dict[tuple[str, int], Seen]:
    """`Seen` states from their stored JSON values (keyed "topic|partition")."""
    out = {}
    try:
        for key, value in values.items():
            topic, partition = key.rsplit("|", 1)
            out[(topic, int(partition))] = Seen.from_json(value)
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise DatasetError(f"{source} holds no valid re-delivery state ({type(exc).__name__}: "
                           f"{exc}); remove the dataset and export again") from None
    return out


def updated_seen(values: dict[str, Any], batch: SinkBatch,
                 resume: dict[tuple[str, int], int]) -> dict[str, Any]:
    """The stored re-delivery states with the batch's (the trajectories'), and without the
    decisions below where a restart reads again (`resume`)."""
    out = dict(values)
    for (topic, partition), value in batch.seen.get(TrajectoryBuilder.name, {}).items():
        out[f"{topic}|{partition}"] = value
    for key, value in out.items():
        name, number = key.rsplit("|", 1)
        below = resume.get((name, int(number)))
        if below is not None and value["dropped"] and value["dropped"][0] < below:
            out[key] = {**value, "dropped": [o for o in value["dropped"] if o >= below]}
    return out


# Minari's [NAMESPACE/]NAME-vN (`minari.dataset.minari_dataset.DATASET_ID_RE`, in ASCII;
# the namespace optional, as Minari takes it, the version required: the exporter appends to
# one version): letters, digits, `-` and `_`, `/` inside the namespace, no `.` at all.
_DATASET_ID = re.compile(
    r"^(?:[-_A-Za-z0-9][-_A-Za-z0-9/]*[-_A-Za-z0-9]/)?[-_A-Za-z0-9]+?-v\d+$")


def check_dataset_id(dataset_id: str, out: Path | None = None) -> str:
    """[NAMESPACE/]NAME-vN (Minari's syntax; `{env}` stands for each env's id), inside
    `out`, or a clear DatasetError."""
    example = dataset_id_for(dataset_id, "env")
    if not _DATASET_ID.match(example) or "//" in example:
        raise DatasetError(f"dataset id {dataset_id!r} is not [NAMESPACE/]NAME-vN "
                           "(for example rlmesh/cartpole-v0, or rlmesh/{env}-v0 for one "
                           "dataset per env)")
    if out is not None and not (out / example).resolve().is_relative_to(out.resolve()):
        raise DatasetError(f"dataset id {dataset_id!r} leads outside {out}")
    return dataset_id

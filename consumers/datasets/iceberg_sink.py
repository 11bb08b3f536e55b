"""The Iceberg export's sink: a joiner and a certificate per partition number (a shard).

A session's events are in partition i of every topic (keyed by session id; the range
assignment gives partition i of every topic to one member), so shard i is a unit that
members own and hand over whole. Each commit carries the states of the shards this
member holds and the offsets of their partitions (iceberg.py merges them into the
table's head, fenced per shard); a member that is assigned shards reads their state
from the table, claims them (an empty commit writing their states again, so whoever
held them before is fenced), and reads again from their resume offsets. The
certificate a user sees is every shard's, merged (`merged_certificate`).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from rlmesh_stream.consumers.datasets import state
from rlmesh_stream.consumers.datasets.certificate import Certificate, skipped_episodes
from rlmesh_stream.consumers.datasets.episodes import Episode, Joiner
from rlmesh_stream.consumers.datasets.iceberg import IcebergStore, IcebergWriter
from rlmesh_stream.consumers.datasets.sink import (
    TRAJECTORY_EVENTS,
    CertificateBuilder,
    DatasetSink,
    TrajectoryBuilder,
    seen_states,
    updated_seen,
)
from rlmesh_stream.consumers.runtime.records import TP
from rlmesh_stream.consumers.runtime.redelivery import Seen
from rlmesh_stream.consumers.sinks import SinkBatch


class ShardedSink(DatasetSink):
    """`DatasetSink` for an Iceberg table written by several members."""

    joins_per_partition = True

    def _load(self) -> None:
        assert self.options.iceberg is not None
        self.table = IcebergStore(self.options.iceberg, self.options.group)
        self.held: set[int] = set()
        self.finished = False
        # at a revocation: shard -> (its joiner and certificate, the state file committed)
        self._parked: dict[int, tuple[tuple[Joiner, Certificate], str | None]] = {}
        self._restore()

    def _restore(self) -> None:
        self.rows = IcebergWriter(self.table)
        self.shards: dict[int, tuple[Joiner, Certificate]] = {}
        # shards taken back as this member left them at a revocation (`rewound`): read on
        # from their read offsets, not again from their resume offsets (`load_offsets`)
        self.resumed: set[int] = set()
        # the re-delivery states of the held shards' partitions ("topic|partition"), as
        # committed or as the last batch left them; `_seen_of` reads a shard's in
        self.seen: dict[str, Any] = {}
        self._seen_read: set[int] = set()

    def _seen_of(self, n: int) -> dict[str, Any]:
        """Shard `n`'s re-delivery states (its partitions'), read from the table once."""
        if n not in self._seen_read:
            self._seen_read.add(n)
            saved = self.table.shard_state(n)
            if isinstance(saved, dict):
                for key, value in dict(saved.get("seen", {})).items():
                    self.seen.setdefault(key, value)
        return {k: v for k, v in self.seen.items() if int(k.rsplit("|", 1)[1]) == n}

    def load_seen(self, builder: str) -> dict[TP, Seen]:
        if builder != TrajectoryBuilder.name:
            return {}
        values: dict[str, Any] = {}
        for n in sorted(self.held):
            values.update(self._seen_of(n))
        return seen_states(values, self.table.source)

    def _shard(self, n: int) -> tuple[Joiner, Certificate]:
        shard = self.shards.get(n)
        if shard is None:
            joiner = Joiner(self.options.filters, self.options.max_held_steps)
            certificate = Certificate()
            saved = self.table.shard_state(n)
            if saved is not None:
                restored = state.load(saved, self.table.source)
                certificate = restored.pop("certificate")
                frontier = {tp: o for tp, o in self.table.offsets(CertificateBuilder.name).items()
                            if tp[1] == n}
                joiner.restore(restored, frontier)
            shard = self.shards[n] = (joiner, certificate)
        return shard

    def joiner_for(self, partition: int) -> Joiner:
        return self._shard(partition)[0]

    def certificate_for(self, partition: int) -> Certificate:
        return self._shard(partition)[1]

    def rewound(self, partitions: list[TP] | None = None) -> None:
        """Reading goes back to the table's offsets for `partitions`: their shards' state
        from the table, claimed (whoever committed them before is fenced). A shard this
        member set aside at its revocation (`revoked`) is taken back as it was when the
        table still names the state file this member committed for it last: nobody
        committed it since (a claim writes a new one), so what is in memory is the table's
        state with the open episodes' records already read."""
        parked, self._parked = self._parked, {}
        self.table.reload()
        self._restore()
        if partitions is not None:
            self.held = {p for _, p in partitions}
        for n in self.held & parked.keys():
            shard, path = parked[n]
            if path is not None and self.table.shards.get(str(n)) == path:
                self.shards[n] = shard
                self.resumed.add(n)
        if self.held:
            self._commit_shards({}, claim=True)

    def revoked(self, read: dict[TP, int] | None = None) -> None:
        """Every partition was taken away (what was complete is committed): this member
        holds no shard, so it decides on none. An eager revocation takes every partition,
        even those the next assignment gives straight back: the shards whose records are
        all read again (`_parkable`, from `read`: the next offset read per partition, all
        of it committed) are set aside with the state file this member committed for them
        last, so that one coming back is not read again from its resume offsets
        (`rewound`). Without `read` (lost partitions, a checkpoint not committed),
        nothing is set aside."""
        self._parked = {} if read is None else self._parkable(read)
        self.held = set()
        self._restore()

    def _parkable(self, read: dict[TP, int]) -> dict[int, tuple[tuple[Joiner, Certificate],
                                                               str | None]]:
        """The held shards whose joiner holds every record of its open episodes: made here,
        or restored from the table and read again past its frontier (what was read before
        the restore), as `read` says. A restored shard short of it still lacks records of
        the episodes it keeps (they are read again from the resume offsets)."""
        out = {}
        for n in self.held & self.shards.keys():
            joiner = self.shards[n][0]
            if all(read.get(tp, -1) >= at for tp, at in joiner.frontier.items()):
                # the state file this member wrote last (`base`), not the head's, which
                # another member's claim may have replaced already
                out[n] = (self.shards[n], self.table.base.get(str(n)))
        return out

    def load_offsets(self, builder: str) -> dict[TP, int]:
        """The table's offsets; a resumed shard's trajectory partitions at their read
        offsets (its open episodes' records are in memory, not to be read again)."""
        out = self.table.offsets(builder)
        if builder == TrajectoryBuilder.name and self.resumed:
            read = self.table.offsets(CertificateBuilder.name)
            out.update({tp: read[tp] for tp in out if tp[1] in self.resumed and tp in read})
        return out

    def group_offsets(self) -> dict[TP, int]:
        """How far every partition is read, as the table's head says (all members')."""
        return self.table.head_offsets(CertificateBuilder.name)

    def _commit(self, batch: SinkBatch) -> None:
        read = {tp: o for tp, o in self.table.offsets(CertificateBuilder.name).items()
                if tp[1] in self.held}
        for u in batch.offsets:
            if u.builder == CertificateBuilder.name:
                read[(u.topic, u.partition)] = u.next_offset
        keep: list[Episode] = []
        skipped = self._skipped()
        for n in sorted(self.held):
            joiner, certificate = self._shard(n)
            certificate.merge()
            for e in joiner.release(final=self.final):
                keep.append(e)  # every env has a steps table (iceberg.py)
                certificate.exported += 1
                certificate.exported_steps += e.length
                certificate.tagged_caution += e.caution
                certificate.without_terminal_observation += not e.terminal_observation
                certificate.abandoned_exported += e.abandoned
        if keep:
            self.rows.write(keep, 0)
        self._commit_shards(read, batch)
        self.released.extend(keep)
        self.counted(keep, self._skipped() - skipped)

    def _skipped(self) -> int:
        """The episodes the held shards' joiners skipped so far."""
        return sum(skipped_episodes(self._shard(n)[0].skipped) for n in self.held)

    def _commit_shards(self, read: dict[TP, int], batch: SinkBatch | None = None,
                       claim: bool = False) -> None:
        trajectory = {et.topic(self.prefix) for et in TRAJECTORY_EVENTS}
        stored = self.table.offsets(CertificateBuilder.name)
        read = {**{tp: o for tp, o in stored.items() if tp[1] in self.held}, **read}
        resume: dict[TP, int] = {}
        states = {}
        for n in sorted(self.held):
            joiner, certificate = self._shard(n)
            mine = {tp: o for tp, o in read.items() if tp[1] == n and tp[0] in trajectory}
            resume.update(joiner.resume_offsets(mine))
            states[n] = state.dump(joiner.state(), certificate)
            # stored whole, never journaled: what changed need not be kept for a journal
            joiner.stored_whole()
            certificate.stored_whole()
            self._seen_of(n)
        self.seen = updated_seen(self.seen, batch or SinkBatch(), resume)
        for n in states:
            states[n]["seen"] = {k: v for k, v in self.seen.items()
                                 if int(k.rsplit("|", 1)[1]) == n}
        offsets = {} if claim else {CertificateBuilder.name: read,
                                    TrajectoryBuilder.name: resume}
        self.table.commit(offsets=offsets, shards=states)

    def at_end(self) -> None:
        """--until-end, every partition read: decide on the open episodes of the shards
        held, while they are still held."""
        self.final = True
        try:
            if self.held:
                self._commit(SinkBatch())
        except Exception:  # fenced (OffsetConflict: the runtime reads again) or failed
            self.final = False
            self._reload()  # the decisions made in memory are not the table's
            raise
        self.finished = True

    def finish(self) -> None:
        """The end of a run (the decisions are `at_end`'s): the certificate over every
        shard, for the summary line."""
        self.table.reload()
        self.summary = merged_certificate(
            [self.table.shard_state(int(n)) for n in sorted(self.table.shards, key=int)])

    def certificate_summary(self) -> dict[str, Any]:
        return dict(getattr(self, "summary", {}))

    def envs_by_steps_table(self) -> dict[str, list[str]]:
        """Per steps table, the envs whose steps it holds (as the table's head says)."""
        return self.table.envs_by_steps_table()

    def _reload(self) -> None:
        self.table.reload()
        self._restore()

    def close(self) -> None:
        self.table.close()


def merged_certificate(saved: list[Any]) -> dict[str, Any]:
    """One certificate of every shard's (sequence ranges joined per producer)."""
    total = Certificate()
    skipped: Counter[str] = Counter()
    for value in saved:
        if value is None:
            continue
        restored = state.load(value, "a shard's state")
        cert: Certificate = restored["certificate"]
        skipped.update(restored["skipped"])
        for producer, p in cert.producers.items():
            into = total.producers.setdefault(producer, {"ranges": [], "duplicates": 0,
                                                         "dead_letters": 0})
            into["duplicates"] += p["duplicates"]
            into["dead_letters"] += p["dead_letters"]
            into["ranges"].extend(p["ranges"])
        total.offsets.update(cert.offsets)
        for k, v in cert.other.items():
            total.other[k] += v
        for k in ("exported", "exported_steps", "tagged_caution",
                  "without_terminal_observation", "abandoned_exported"):
            setattr(total, k, getattr(total, k) + getattr(cert, k))
    for p in total.producers.values():
        merged: list[list[int]] = []
        for a, b in sorted(p["ranges"]):
            if merged and merged[-1][1] + 1 >= a:
                p["duplicates"] += max(0, min(merged[-1][1], b) - a + 1)
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        p["ranges"] = merged
    return total.summary(skipped)

"""The dataset's own manifest: offsets, joiner state and certificate, committed atomically.

Layout under the dataset directory:

    .rlmesh-export/manifest.json     the committed state (replaced atomically)
    .rlmesh-export/pending-<gen>.json the joiner's small state at generation <gen> (sessions'
                                     flags, which episodes are still pending, counts; JSON,
                                     never pickle: see state.py)
    .rlmesh-export/lock              held (flock) by the one process exporting here

A commit writes the batch's data files (named by generation), the pending
state, then `manifest.json` by write-to-temp + fsync + rename. Whatever a
crash leaves behind that the manifest does not name (data files of a newer
generation, stale pending files) is removed when the directory is opened
again, so a SIGKILL at any instant is as if the batch never ran.
"""

from __future__ import annotations

import bisect
import fcntl
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlmesh_stream.schemas.cli_values import STATE_DIR
from rlmesh_stream.schemas.contract import headers as h
from rlmesh_stream.schemas.errors import RlmeshStreamError

VERSION = 1
# The certificate's totals are read by JVM readers (Spark, Flink: a JSON number past a long
# breaks them): a sum that would pass 2**63 - 1 is written as 2**63 - 1 (saturated). One
# producer's own figures cannot pass it (sequences stop at headers.MAX_SEQUENCE); a sum
# over producers can (two forged sequence headers near 2**63).
INT64_MAX = 2**63 - 1
# Producer ids whose sequences the certificate tracks one by one (their ranges, in the
# state and the manifest, rewritten at each commit). A fleet has one id per producer
# process; past this many, a producer id that changes per record would grow both without
# bound (4.7 MB at 60 000 ids, rewritten at every checkpoint): the records of further ids
# are counted in `other_producers`, their sequences unchecked. ~110 bytes per id in
# manifest.json: 1 000 ids, ~110 kB.
MAX_PRODUCERS = 1000


def saturated(n: int) -> int:
    """`n`, or INT64_MAX when it is larger."""
    return min(n, INT64_MAX)


class DatasetError(RlmeshStreamError):
    """A dataset directory that cannot be exported into (one clear line for the user)."""


@dataclass
class Certificate:
    """Completeness over the exported range: the delivery check, offsets and counts."""

    producers: dict[str, dict[str, Any]] = field(default_factory=dict)
    offsets: dict[str, list[int]] = field(default_factory=dict)  # "topic[p]" -> [first, next]
    exported: int = 0
    exported_steps: int = 0
    tagged_caution: int = 0
    without_terminal_observation: int = 0
    abandoned_exported: int = 0
    # the records of producer ids past MAX_PRODUCERS: counted, their sequences unchecked
    other: dict[str, int] = field(default_factory=lambda: {"records": 0, "dead_letters": 0})
    _batch: dict[str, list[int]] = field(default_factory=dict, repr=False)
    _dead: dict[str, int] = field(default_factory=dict, repr=False)
    _fresh: int = field(default=0, repr=False)  # producers of `_batch` not yet tracked

    def saw(self, producer: str, seq: int, dead_letter: bool) -> None:
        """One record's (producer, sequence); merged into the ranges by `merge` (per batch:
        records of different topics interleave, so sequences arrive out of order)."""
        seqs = self._batch.get(producer)
        if seqs is None:
            if producer not in self.producers:
                if len(self.producers) + self._fresh >= MAX_PRODUCERS:
                    self.other["records"] += 1
                    self.other["dead_letters"] += dead_letter
                    return
                self._fresh += 1
            seqs = self._batch[producer] = []
        seqs.append(seq)
        if dead_letter:
            self._dead[producer] = self._dead.get(producer, 0) + 1

    def merge(self) -> None:
        """Fold the batch's sequences into each producer's sorted, disjoint ranges.

        The batch's runs are placed by bisection and the ranges between them copied whole
        (`_with_runs`), so the Python work is the batch's: records of different topics are
        read at different paces, so one producer's ranges are many while a backlog is
        read, and a merge that sorted and walked all of them at each commit grew with the
        history."""
        for producer, seqs in self._batch.items():
            p = self.producers.setdefault(producer, {"ranges": [], "duplicates": 0,
                                                     "dead_letters": 0})
            p["dead_letters"] += self._dead.get(producer, 0)
            ranges: list[list[int]] = p["ranges"]
            starts = [r[0] for r in ranges]
            new: list[list[int]] = []  # the batch's runs, none inside a range seen before
            last = None
            for seq in sorted(seqs):
                if seq == last:
                    p["duplicates"] += 1
                    continue
                last = seq
                at = bisect.bisect_right(starts, seq) - 1
                if at >= 0 and ranges[at][0] <= seq <= ranges[at][1]:
                    p["duplicates"] += 1
                    continue
                if new and new[-1][1] + 1 == seq:
                    new[-1][1] = seq
                else:
                    new.append([seq, seq])
            if new:
                p["ranges"] = _with_runs(ranges, starts, new)
        self._batch = {}
        self._dead = {}
        self._fresh = 0

    def covered(self, topic: str, partition: int, offset: int) -> None:
        key = f"{topic}[{partition}]"
        span = self.offsets.get(key)
        if span is None:
            self.offsets[key] = [offset, offset + 1]
        else:
            span[0] = min(span[0], offset)
            span[1] = max(span[1], offset + 1)

    def summary(self, skipped: dict[str, int]) -> dict[str, Any]:
        skipped = dict(skipped)
        late = skipped.pop("exported_before_their_caution_advisory", 0)
        producers = {}
        for pid, p in sorted(self.producers.items()):
            ranges = p["ranges"]
            seen = sum(b - a + 1 for a, b in ranges)
            top = ranges[-1][1] if ranges else -1
            producers[pid] = {"sequences_seen": seen, "first_seq": ranges[0][0] if ranges else None,
                              "last_seq": top, "gaps": top + 1 - seen,
                              "duplicates": p["duplicates"], "dead_letters": p["dead_letters"]}
        other = {**self.other, "gaps": 0, "duplicates": 0}
        if len(producers) > MAX_PRODUCERS:  # several shards' (Iceberg): the rest folded
            ranked = sorted(producers, key=lambda k: (
                -(producers[k]["gaps"] + producers[k]["duplicates"]), k))
            for pid in ranked[MAX_PRODUCERS:]:
                p = producers.pop(pid)
                other["records"] += p["sequences_seen"] + p["duplicates"]
                for k in ("gaps", "duplicates", "dead_letters"):
                    other[k] += p[k]
        listed = [*producers.values(), other]
        return {
            "producers": producers,
            "other_producers": {k: saturated(v) for k, v in other.items()},
            "gaps": saturated(sum(p["gaps"] for p in listed)),
            "duplicates": saturated(sum(p["duplicates"] for p in listed)),
            "dead_letters": saturated(sum(p["dead_letters"] for p in listed)),
            "kafka_offsets": dict(sorted(self.offsets.items())),
            "episodes_exported": self.exported, "steps_exported": self.exported_steps,
            "episodes_tagged_caution": self.tagged_caution,
            "episodes_without_terminal_observation": self.without_terminal_observation,
            "episodes_abandoned_exported": self.abandoned_exported,
            # a caution advisory read after its session's episodes were written: untagged
            "episodes_exported_before_their_caution_advisory": late,
            "episodes_skipped": dict(sorted(skipped.items())),
        }


def _with_runs(ranges: list[list[int]], starts: list[int],
               runs: list[list[int]]) -> list[list[int]]:
    """Sorted, disjoint `ranges` (`starts`: their first sequences) with sorted `runs` put
    in, each run in a gap between two ranges: joined to a range it touches, else a range
    of its own. The ranges between two runs are copied by slicing, not looked at."""
    out: list[list[int]] = []
    done = 0  # ranges[:done] are in `out`
    for a, b in runs:
        at = bisect.bisect_left(starts, a, done)
        out.extend(ranges[done:at])
        done = at
        if out and out[-1][1] + 1 == a:
            out[-1] = [out[-1][0], b]
        else:
            out.append([a, b])
        if at < len(ranges) and b + 1 == ranges[at][0]:
            out[-1] = [out[-1][0], ranges[at][1]]
            done = at + 1
    out.extend(ranges[done:])
    return out


def header_sequence(headers: dict[str, bytes]) -> tuple[str, int] | None:
    """(producer, sequence) of a record's delivery headers, either version; None without
    them or with a sequence the delivery check calls invalid (`parse_sequence`: negative,
    past a BIGINT, not ASCII digits), which no range counts."""
    stamp = h.delivery_stamp(headers)  # either version of the contract's headers
    if stamp is None:
        return None
    _, producer, seq = stamp
    try:
        return producer.decode("utf-8", "replace"), h.parse_sequence(seq)
    except ValueError:
        return None


@dataclass
class Committed:
    """What `manifest.json` holds."""

    generation: int = 0
    format: str = ""
    dataset_id: str = ""
    offsets: dict[str, dict[str, int]] = field(default_factory=dict)  # builder -> "t|p" -> next
    writer: dict[str, Any] = field(default_factory=dict)  # the writer's own committed state
    certificate: dict[str, Any] = field(default_factory=dict)


class ManifestStore:
    """One dataset directory's committed state; opening it cleans up after a crash."""

    def __init__(self, root: Path, *, fmt: str, dataset_id: str) -> None:
        self.root = root
        self.state_dir = root / STATE_DIR
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self._lock = open(self.state_dir / "lock", "a+")  # noqa: SIM115 - held while open
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise DatasetError(f"{root} is being exported into by another process") from None
        self.committed = Committed(format=fmt, dataset_id=dataset_id)
        self.pending_state: Any = None  # the JSON values of state.py's `dump`
        path = self.state_dir / "manifest.json"
        if path.exists():
            data = _read_json(path)
            try:
                self.committed = Committed(**{k: data[k] for k in Committed.__dataclass_fields__})
            except (KeyError, TypeError) as exc:
                raise DatasetError(f"{path} is not an export manifest ({exc})") from None
            if self.committed.format != fmt:
                raise DatasetError(f"{root} holds a {self.committed.format} dataset, "
                                   f"not {fmt}")
            if self.committed.dataset_id != dataset_id:
                raise DatasetError(f"{root} holds dataset {self.committed.dataset_id}, "
                                   f"not {dataset_id}")
            if (self.state_dir / f"pending-{self.committed.generation}.pkl").exists():
                raise DatasetError(
                    f"{root} holds a pickled export state (an older rlmesh-stream), which is "
                    "never loaded (a pickle can run code): export into a new directory")
            pending = self.state_dir / self._pending_name(self.committed.generation)
            if pending.exists():
                self.pending_state = _read_json(pending)
        for stale in self.state_dir.glob("pending-*.json"):
            if stale.name != self._pending_name(self.committed.generation):
                stale.unlink()

    @staticmethod
    def _pending_name(generation: int) -> str:
        return f"pending-{generation}.json"

    def offsets(self, builder: str) -> dict[tuple[str, int], int]:
        out = {}
        for key, nxt in self.committed.offsets.get(builder, {}).items():
            topic, part = key.rsplit("|", 1)
            out[(topic, int(part))] = int(nxt)
        return out

    def commit(self, *, offsets: dict[str, dict[tuple[str, int], int]], writer: dict[str, Any],
               joiner_state: dict[str, Any], certificate: dict[str, Any]) -> None:
        """Make generation+1 the committed one (data files of it must already be written);
        `joiner_state`: JSON values (state.py's `dump`)."""
        gen = self.committed.generation + 1
        write_atomically(self.state_dir / self._pending_name(gen),
                         json.dumps(joiner_state, separators=(",", ":")), replace_dir=False)
        merged = {builder: {f"{topic}|{part}": nxt for (topic, part), nxt in sorted(o.items())}
                  for builder, o in offsets.items()}
        new = Committed(generation=gen, format=self.committed.format,
                        dataset_id=self.committed.dataset_id, offsets=merged, writer=writer,
                        certificate=certificate)
        write_atomically(self.state_dir / "manifest.json",
                         json.dumps(new.__dict__, indent=1, sort_keys=True))
        old = self.state_dir / self._pending_name(self.committed.generation)
        self.committed = new
        self.pending_state = joiner_state
        if old.exists():
            old.unlink()

    def close(self) -> None:
        self._lock.close()


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise DatasetError(f"cannot read {path} ({exc})") from None


def write_atomically(path: Path, text: str, replace_dir: bool = True) -> None:
    """`path` holds `text` whole or is as before (write-to-temp, fsync, rename); the
    directory is synced too unless `replace_dir` is False (a file the next atomic write
    of the same directory makes durable)."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    if not replace_dir:
        return
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

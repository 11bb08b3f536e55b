"""The dataset's own manifest: offsets, joiner state and certificate, committed atomically.

Layout under the dataset directory:

    .rlmesh-export/manifest.json       the committed state (replaced atomically): offsets,
                                       the writer's state, the certificate's totals, and
                                       which state files hold the rest, how far
    .rlmesh-export/pending-<g>.json    the export's resume state (state.py: sessions' flags,
                                       which episodes are still pending, the certificate's
                                       per-producer ranges, the re-delivery marks) as it
                                       was at generation <g>, whole (JSON, never pickle)
    .rlmesh-export/pending-<g>.jsonl   the journal: one line per later generation, with
                                       only what that commit changed; the manifest names
                                       its committed length and checksum
    .rlmesh-export/lock                held (flock) by the one process exporting here

A commit writes the batch's data files (named by generation), appends the state's
changes to the journal (fsync), then writes `manifest.json` by write-to-temp + fsync +
rename: the manifest is the commit point. A commit writes what changed, not the state:
the state is rewritten whole (a new `pending-<g>.json`, an empty journal) only when the
journal has grown past twice the state as last written, and at the end of an offline
run. Opening the directory cuts the journal back to its committed length and removes
whatever else the manifest does not name (data files of a newer generation, state files
of a compaction not committed), so a SIGKILL at any instant is as if the batch never ran.
"""

from __future__ import annotations

import bisect
import fcntl
import json
import os
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlmesh_stream.schemas.contract import headers as h
from rlmesh_stream.schemas.errors import RlmeshStreamError

STATE_DIR = ".rlmesh-export"
VERSION = 1
# The certificate's totals are read by JVM readers (Spark, Flink: a JSON number past a long
# breaks them): a sum that would pass 2**63 - 1 is written as 2**63 - 1 (saturated). One
# producer's own figures cannot pass it (sequences stop at headers.MAX_SEQUENCE); a sum
# over producers can (two forged sequence headers near 2**63).
INT64_MAX = 2**63 - 1
# Producer ids whose sequences the certificate tracks one by one (their ranges, in the
# state). A fleet has one id per producer process; past this many, a producer id that
# changes per record would grow the state without bound (4.7 MB at 60 000 ids): the
# records of further ids are counted in `other_producers`, their sequences unchecked.
MAX_PRODUCERS = 1000
# The journal is compacted (the state written whole, the journal started again) once it
# would pass twice the state as last written whole, and not below this: replaying it at
# the next open reads at most ~3x the state.
COMPACT_AT_LEAST = 64 * 1024


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
    # what changed since `changes` was last called: producers merged, offsets covered
    _changed: set[str] = field(default_factory=set, repr=False)
    _moved: set[str] = field(default_factory=set, repr=False)

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
        self._changed.update(self._batch)
        self._batch = {}
        self._dead = {}
        self._fresh = 0

    def changes(self) -> dict[str, Any]:
        """The producers and offsets changed since the last call (JSON-ready copies, as
        state.py's `dump` writes them): a commit journals these, not every producer."""
        producers = {k: {"ranges": list(map(list, p["ranges"])),
                         "duplicates": p["duplicates"], "dead_letters": p["dead_letters"]}
                     for k in sorted(self._changed) if (p := self.producers.get(k)) is not None}
        offsets = {k: list(self.offsets[k]) for k in sorted(self._moved) if k in self.offsets}
        self._changed = set()
        self._moved = set()
        return {"producers": producers, "offsets": offsets}

    def covered(self, topic: str, partition: int, offset: int) -> None:
        key = f"{topic}[{partition}]"
        self._moved.add(key)
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
    # The certificate (`Certificate.summary`). In manifest.json without `producers`: each
    # producer's figures follow from its ranges in the state, which the journal keeps
    # incrementally (state.py's `read_certificate` puts them back); in memory, whole.
    certificate: dict[str, Any] = field(default_factory=dict)
    # The state files (`StateFiles.pointer`); {}: a manifest of an older rlmesh-stream,
    # whose state is `pending-<generation>.json` whole
    state: dict[str, Any] = field(default_factory=dict)


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
        if (self.state_dir / "manifest.json").exists():
            self.committed = read_manifest(self.state_dir)
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
        self.files = StateFiles.of(self.state_dir, self.committed)
        self.files.cut()  # a commit killed after its journal append: not committed
        named = self.files.names()
        for stale in self.state_dir.iterdir():  # a killed commit's (an older one's pickle kept)
            if (stale.name.startswith("pending-") and stale.suffix in (".json", ".jsonl", ".tmp")
                    and stale.name not in named) or stale.name == "manifest.json.tmp":
                stale.unlink()
        # the committed state as read at opening, until the first commit (`read_state`)
        self._read: tuple[Any, list[dict[str, Any]]] | None = None

    def offsets(self, builder: str) -> dict[tuple[str, int], int]:
        out = {}
        for key, nxt in self.committed.offsets.get(builder, {}).items():
            topic, part = key.rsplit("|", 1)
            out[(topic, int(part))] = int(nxt)
        return out

    def read_state(self) -> tuple[Any, list[dict[str, Any]]]:
        """The committed state as stored: the whole state last written (None: none yet,
        JSON values of state.py's `dump`) and the journal's lines since (state.py's
        `replay` folds them)."""
        if self._read is None:
            self._read = self.files.read()
        return self._read

    def commit(self, *, offsets: dict[str, dict[tuple[str, int], int]], writer: dict[str, Any],
               certificate: dict[str, Any], changes: dict[str, Any],
               whole: Callable[[], Any], compact: bool = False) -> None:
        """Make generation+1 the committed one (data files of it must already be written).
        `changes`: what the state's changes since the last commit are (state.py's
        `Changes.line`), appended to the journal; `whole`: the whole state (state.py's
        `dump`), written instead when the journal is compacted (`compact`, or grown past
        twice the state as last written whole). `certificate`: `Certificate.summary`."""
        gen = self.committed.generation + 1
        self._read = None
        files = self.files
        old = files.names()
        line = (json.dumps({"generation": gen, **changes}, separators=(",", ":")) + "\n"
                ).encode()
        if compact or not files.journal or files.journal_bytes + len(line) > max(
                2 * files.base_bytes, COMPACT_AT_LEAST):
            files = files.rewritten(gen, json.dumps(whole(), separators=(",", ":")))
        else:
            files = files.appended(line)
        merged = {builder: {f"{topic}|{part}": nxt for (topic, part), nxt in sorted(o.items())}
                  for builder, o in offsets.items()}
        new = Committed(generation=gen, format=self.committed.format,
                        dataset_id=self.committed.dataset_id, offsets=merged, writer=writer,
                        certificate=certificate, state=files.pointer())
        on_disk = {**new.__dict__, "certificate": {k: v for k, v in certificate.items()
                                                   if k != "producers"}}
        write_atomically(self.state_dir / "manifest.json",
                         json.dumps(on_disk, indent=1, sort_keys=True))
        self.committed = new
        self.files = files
        for name in old - files.names():  # a compaction's: the state before it
            (self.state_dir / name).unlink(missing_ok=True)

    def close(self) -> None:
        self._lock.close()


class StateFiles:
    """Which files hold the committed state, and how much of them (the manifest's `state`):
    `base`, pending-<g>.json, the whole state at generation g ("": none yet), and
    `journal`, pending-<g>.jsonl, a line per later generation, `journal_bytes` of it
    committed. Checksums (CRC-32) of both, the journal's kept as it grows."""

    def __init__(self, state_dir: Path, generation: int, pointer: dict[str, Any]) -> None:
        self.state_dir = state_dir
        self.generation = generation  # the committed generation the files are at
        self.base = str(pointer.get("base", ""))
        self.base_generation = int(pointer.get("base_generation", 0))
        self.base_bytes = int(pointer.get("base_bytes", 0))
        crc = pointer.get("base_crc32")
        self.base_crc32 = None if crc is None else int(crc)  # None: not checked
        self.journal = str(pointer.get("journal", ""))
        self.journal_bytes = int(pointer.get("journal_bytes", 0))
        self.journal_crc32 = int(pointer.get("journal_crc32", 0))

    @classmethod
    def of(cls, state_dir: Path, committed: Committed) -> StateFiles:
        """The files `committed` names (a DatasetError if it names them wrong)."""
        try:
            if committed.state:
                files = cls(state_dir, committed.generation, committed.state)
                for name in (files.base, files.journal):
                    if Path(name).name != name or not name.startswith("pending-"):
                        raise ValueError(f"{name!r} is not a state file name")
                return files
        except (AttributeError, TypeError, ValueError) as exc:
            raise DatasetError(f"{state_dir / 'manifest.json'} is not an export manifest "
                               f"(state: {exc})") from None
        # none named: an older rlmesh-stream's manifest, its state whole, no journal
        name = f"pending-{committed.generation}.json"
        if not committed.generation or not (state_dir / name).exists():
            return cls(state_dir, committed.generation, {})
        return cls(state_dir, committed.generation, {
            "base": name, "base_generation": committed.generation,
            "base_bytes": (state_dir / name).stat().st_size})

    def names(self) -> set[str]:
        return {n for n in (self.base, self.journal) if n}

    def pointer(self) -> dict[str, Any]:
        return {"base": self.base, "base_generation": self.base_generation,
                "base_bytes": self.base_bytes, "base_crc32": self.base_crc32,
                "journal": self.journal, "journal_bytes": self.journal_bytes,
                "journal_crc32": self.journal_crc32}

    def _invalid(self, why: str) -> DatasetError:
        return DatasetError(f"{self.state_dir} is not a valid export state ({why}); remove "
                            "the dataset and export again")

    def read(self) -> tuple[Any, list[dict[str, Any]]]:
        """The whole state last written (None: none) and the journal's committed lines;
        a DatasetError naming what is wrong when they are not what the manifest says."""
        if not self.base:
            return None, []
        try:
            raw = (self.state_dir / self.base).read_bytes()
        except OSError as exc:
            raise self._invalid(f"{self.base}: {exc.strerror or exc}") from None
        if self.base_crc32 is not None and (len(raw) != self.base_bytes
                                            or zlib.crc32(raw) != self.base_crc32):
            raise self._invalid(f"{self.base} is not the file the manifest committed: "
                                f"{len(raw)} bytes, {self.base_bytes} committed, or another "
                                "checksum")
        try:
            base = json.loads(raw)
        except (UnicodeDecodeError, ValueError) as exc:
            raise self._invalid(f"{self.base}: {exc}") from None
        return base, self._lines()

    def _lines(self) -> list[dict[str, Any]]:
        if not self.journal_bytes:
            return []
        path = self.state_dir / self.journal
        try:
            with open(path, "rb") as f:
                data = f.read(self.journal_bytes)
        except OSError as exc:
            raise self._invalid(f"{self.journal}: {exc.strerror or exc}") from None
        if len(data) < self.journal_bytes or zlib.crc32(data) != self.journal_crc32:
            raise self._invalid(f"{self.journal} does not hold the {self.journal_bytes} bytes "
                                f"the manifest committed (its checksum differs: changed or "
                                f"cut short)")
        lines = []
        expected = self.base_generation + 1
        for number, text in enumerate(data.split(b"\n")[:-1], 1):
            try:
                line = json.loads(text)
                if not isinstance(line, dict) or line.get("generation") != expected:
                    raise ValueError(f"not generation {expected}'s changes")
            except (UnicodeDecodeError, ValueError) as exc:
                raise self._invalid(f"{self.journal} line {number}: {exc}") from None
            lines.append(line)
            expected += 1
        if expected != self.generation + 1 or not data.endswith(b"\n"):
            raise self._invalid(f"{self.journal} holds generations {self.base_generation + 1} "
                                f"to {expected - 1}, the manifest committed "
                                f"{self.generation}")
        return lines

    def cut(self) -> None:
        """The journal back to its committed length (what a commit killed after its append
        left past it is not committed)."""
        if not self.journal:
            return
        path = self.state_dir / self.journal
        if path.exists() and path.stat().st_size > self.journal_bytes:
            os.truncate(path, self.journal_bytes)

    def rewritten(self, generation: int, text: str) -> StateFiles:
        """The state written whole as of `generation`, its journal empty (the manifest
        written next commits them; the files named before stay until then)."""
        data = text.encode()
        name = f"pending-{generation}.json"
        write_atomically(self.state_dir / name, text, replace_dir=False)
        return StateFiles(self.state_dir, generation, {
            "base": name, "base_generation": generation, "base_bytes": len(data),
            "base_crc32": zlib.crc32(data), "journal": f"pending-{generation}.jsonl"})

    def appended(self, line: bytes) -> StateFiles:
        """`line` appended to the journal at its committed length (a killed or failed
        commit's bytes past it are overwritten) and synced; not committed until the
        manifest names the new length."""
        fd = os.open(self.state_dir / self.journal, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            if os.fstat(fd).st_size != self.journal_bytes:
                os.ftruncate(fd, self.journal_bytes)
            os.pwrite(fd, line, self.journal_bytes)
            os.fdatasync(fd)
        finally:
            os.close(fd)
        return StateFiles(self.state_dir, self.generation + 1, {
            **self.pointer(), "journal_bytes": self.journal_bytes + len(line),
            "journal_crc32": zlib.crc32(line, self.journal_crc32)})


def read_manifest(state_dir: Path) -> Committed:
    """`manifest.json` of `state_dir`, or a DatasetError naming what is wrong."""
    path = state_dir / "manifest.json"
    data = _read_json(path)
    try:
        return Committed(**{k: data[k] for k in Committed.__dataclass_fields__
                            if k != "state"}, state=dict(data.get("state") or {}))
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise DatasetError(f"{path} is not an export manifest ({exc})") from None


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

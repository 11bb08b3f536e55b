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

import fcntl
import json
import os
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlmesh_stream.schemas.cli_values import STATE_DIR
from rlmesh_stream.schemas.errors import RlmeshStreamError

VERSION = 1
# The journal is compacted (the state written whole, the journal started again) once it
# would pass twice the state as last written whole, and not below this: replaying it at
# the next open reads at most ~3x the state.
COMPACT_AT_LEAST = 64 * 1024


class DatasetError(RlmeshStreamError):
    """A dataset directory that cannot be exported into (one clear line for the user)."""


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

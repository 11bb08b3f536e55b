"""The on-disk spool: accepted events that could not go to Kafka, kept in order across restarts.

Layout: `<root>/<owner>/<NNNNNNNNNNNN>.seg`, one directory per producer
process, each locked with `flock` for as long as its process lives. Records
are appended to the open segment with a single `os.write` each, so they
survive the process being killed (they are in the page cache the moment the
call returns). A segment is deleted only once every record in it has been
delivered, so a crash mid-drain replays the segment: at-least-once, and the
record headers (producer id + sequence) let a consumer drop the duplicates.

A new process adopts the directories of dead ones (their lock is free) and
drains them first, oldest first. A segment it cannot read whole (a torn
tail, bytes a machine crash damaged, a record of an event type a newer
version wrote, a directory named like a segment) is never deleted: the
original is set aside in `<root>/corrupt/`, its intact records (found again
past the damage through the CRC framing) are delivered, and the records
lost are counted by kind (`lost`) and logged.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import threading
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from rlmesh_stream.producer.records import Damage, Record, encode_record, scan_records

log = logging.getLogger(__name__)

_LOCK_NAME = ".lock"
_SUFFIX = ".seg"
# Where segments this process cannot read whole are kept, beside the owners' directories; their
# names end in `.bad`, not `.seg`, so no version of the spool takes them for a live segment.
SET_ASIDE_DIR = "corrupt"
_SET_ASIDE_SUFFIX = ".bad"


def _try_lock(directory: Path) -> int | None:
    """An exclusive flock on `directory`'s lock file, or None when a live process holds it."""
    fd = os.open(directory / _LOCK_NAME, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


@dataclass
class _Segment:
    path: Path
    records: int
    nbytes: int


class SpoolBatch:
    """One segment's records, handed to the drainer; `release` deletes the file."""

    __slots__ = ("_spool", "records", "segment")

    def __init__(self, spool: Spool, segment: _Segment, records: list[Record]) -> None:
        self._spool = spool
        self.segment = segment
        self.records = records

    def release(self) -> None:
        self._spool._release(self.segment)


class Spool:
    """An append-only, segmented, crash-safe FIFO of records under `root`."""

    def __init__(
        self, root: Path, owner: str, *, max_bytes: int | None = None,
        segment_bytes: int = 8 * 1024 * 1024,
    ) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.directory = self.root / owner
        self.directory.mkdir(exist_ok=True)
        own_lock = _try_lock(self.directory)
        if own_lock is None:
            raise RuntimeError(f"spool directory {self.directory} is held by another process")
        self._own_lock = own_lock
        self._max_bytes = max_bytes
        self._segment_bytes = segment_bytes
        self._lock = threading.RLock()  # reentrant: the SIGTERM handler may close mid-put
        self._ready: deque[_Segment] = deque()
        self._adopted: dict[Path, int] = {}  # dead owner's dir -> our lock on it
        self._fd: int | None = None
        self._current: _Segment | None = None
        self._next_index = 0
        self._count = 0  # records on disk not yet handed out
        self._bytes = 0  # bytes on disk, handed out or not
        # Found at start-up in the segments of dead owners: "spool:<damage kind>" -> records lost
        # (`records.Damage`), and how many segments were set aside in `SET_ASIDE_DIR`.
        self.lost: dict[str, int] = {}
        self.set_aside = 0
        self.recovered = self._adopt_orphans()

    # -- start-up ----------------------------------------------------------

    def _adopt_orphans(self) -> int:
        """Queue the segments of every sibling directory whose process is gone.

        A sibling is a spool's only if it holds the lock file every owner creates first:
        a spool directory shared with other files (a user's folder, a mistyped path)
        never has its other folders locked, emptied or removed."""
        siblings = [p for p in self.root.iterdir()
                    if p.is_dir() and p != self.directory and p.name != SET_ASIDE_DIR
                    and (p / _LOCK_NAME).is_file()]
        recovered = 0
        for sibling in sorted(siblings, key=lambda p: p.stat().st_mtime):
            try:
                fd = _try_lock(sibling)
            except OSError as exc:
                log.error("rlmesh-stream: spool directory %s cannot be locked (%s); its events "
                          "are left there", sibling, exc)
                continue
            if fd is None:
                continue  # a live producer owns it
            for stale in sibling.glob("*" + _SUFFIX + ".tmp"):  # a repair cut short
                with contextlib.suppress(OSError):
                    stale.unlink()
            segments = [s for p in sorted(sibling.glob("*" + _SUFFIX))
                        if (s := self._adopt_segment(p)) is not None]
            if not segments:
                self._remove_dir(sibling, fd)
                continue
            self._adopted[sibling] = fd
            for segment in segments:
                self._ready.append(segment)
                self._count += segment.records
                self._bytes += segment.nbytes
                recovered += segment.records
        if recovered:
            log.info("spool: %d events left by an earlier process will be delivered first",
                     recovered)
        return recovered

    def _adopt_segment(self, path: Path) -> _Segment | None:
        """A dead owner's segment, ready to drain; a damaged one is first set aside and repaired.

        None when nothing in it can be delivered (then it is set aside whole),
        or when it is damaged and could not be set aside (then it is left in
        place for the next process, and not delivered, so it is never deleted).
        """
        try:
            data = path.read_bytes()
        except OSError as exc:  # a directory named like a segment, a file we may not read
            kept = self._set_aside(path, b"")
            log.error("rlmesh-stream: spool segment %s cannot be read (%s); %s", path,
                      exc.strerror or exc, _where(kept))
            return None
        scan = scan_records(data)
        if not scan.damage:
            return _Segment(path, len(scan.records), len(data))
        clean = b"".join(data[start:end] for start, end in scan.frames)
        kept = self._set_aside(path, clean)
        delivered = (f"{len(scan.records)} intact records in it are delivered" if kept else
                     "not delivered")
        log.error("rlmesh-stream: spool segment %s is damaged: %s; %s; %s", path,
                  "; ".join(_describe(d, len(data)) for d in scan.damage), delivered, _where(kept))
        if kept is None:
            return None
        for kind, n in scan.lost().items():
            self.lost[f"spool:{kind}"] = self.lost.get(f"spool:{kind}", 0) + n
        return _Segment(path, len(scan.records), len(clean)) if clean else None

    def _set_aside(self, path: Path, clean: bytes) -> Path | None:
        """Keep `path` in `SET_ASIDE_DIR`, leaving its intact frames (`clean`, if any) in its place.

        Crash-safe: the clean copy is written and synced first, the original
        is linked aside, then the copy replaces it; a crash in between leaves
        the original in place (and at worst a second copy aside). None when the
        file system refused (the original then stays where it was).
        """
        try:
            aside = self.root / SET_ASIDE_DIR
            aside.mkdir(exist_ok=True)
            target = _free_name(aside / f"{path.parent.name}-{path.name}{_SET_ASIDE_SUFFIX}")
            if not clean:
                os.rename(path, target)
            else:
                tmp = path.with_name(path.name + ".tmp")
                _write_synced(tmp, clean)
                try:
                    os.link(path, target)
                except OSError:  # no hard links here: a copy keeps the bytes as well
                    _write_synced(target, path.read_bytes())
                os.replace(tmp, path)
        except OSError as exc:
            log.error("rlmesh-stream: spool segment %s could not be set aside (%s)", path, exc)
            return None
        self.set_aside += 1
        return target

    @staticmethod
    def _remove_dir(directory: Path, lock_fd: int) -> None:
        with contextlib.suppress(OSError):
            (directory / _LOCK_NAME).unlink()
            directory.rmdir()
        os.close(lock_fd)

    # -- the Backlog protocol ----------------------------------------------

    def put(self, record: Record) -> bool:
        frame = encode_record(record)
        with self._lock:
            if self._max_bytes is not None and self._bytes + len(frame) > self._max_bytes:
                return False
            if self._fd is None or self._current is None:
                self._open_segment()
            assert self._fd is not None and self._current is not None
            view = memoryview(frame)
            while view:
                written = os.write(self._fd, view)
                view = view[written:]
            self._current.records += 1
            self._current.nbytes += len(frame)
            self._count += 1
            self._bytes += len(frame)
            if self._current.nbytes >= self._segment_bytes:
                self._seal()
        return True

    def take(self) -> SpoolBatch | None:
        with self._lock:
            if not self._ready and self._current is not None and self._current.records:
                self._seal()
            if not self._ready:
                return None
            segment = self._ready.popleft()
        records = scan_records(segment.path.read_bytes()).records
        with self._lock:
            self._count -= segment.records
        return SpoolBatch(self, segment, records)

    def __len__(self) -> int:
        return self._count

    @property
    def nbytes(self) -> int:
        return self._bytes

    def close(self) -> None:
        """Seal the open segment and unlock; undelivered segments stay for the next process."""
        with self._lock:
            if self._current is not None:
                self._seal()
            for directory, fd in self._adopted.items():
                if not any(directory.glob("*" + _SUFFIX)):
                    self._remove_dir(directory, fd)
                else:
                    os.close(fd)
            self._adopted.clear()
            os.close(self._own_lock)

    # -- internals -----------------------------------------------------------

    def _open_segment(self) -> None:
        path = self.directory / f"{self._next_index:012d}{_SUFFIX}"
        self._next_index += 1
        self._fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o644)
        self._current = _Segment(path, 0, 0)

    def _seal(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._current is not None:
            if self._current.records:
                self._ready.append(self._current)
            else:
                with contextlib.suppress(OSError):
                    self._current.path.unlink()
            self._current = None

    def _release(self, segment: _Segment) -> None:
        with self._lock:
            with contextlib.suppress(FileNotFoundError):
                segment.path.unlink()
            self._bytes -= segment.nbytes
            directory = segment.path.parent
            fd = self._adopted.get(directory)
            if fd is not None and not any(s.path.parent == directory for s in self._ready):
                del self._adopted[directory]
                self._remove_dir(directory, fd)


def _describe(damage: Damage, size: int) -> str:
    """One damaged span of a segment of `size` bytes, for the log line."""
    about = "" if damage.exact else "about "
    records = f"{about}{damage.records} record{'s' if damage.records != 1 else ''}"
    where = f"bytes {damage.start}-{damage.end}"
    if damage.kind == "torn-tail":
        return f"{records} lost to a write cut short at the end ({where}: a torn tail)"
    if damage.kind == "unreadable":
        return (f"{records} with a valid CRC this version cannot decode ({where}: an event "
                f"type it does not know, a newer version's?)")
    if damage.end < size:
        return (f"{records} lost to corrupt bytes in the middle ({where}); read on from the "
                f"next intact record")
    return f"{records} lost to corrupt bytes at the end ({where})"


def _where(kept: Path | None) -> str:
    if kept is None:
        return "it is left in place (never deleted) and the next process tries again"
    return f"the original is kept as {kept} (never deleted)"


def _free_name(path: Path) -> Path:
    n = 0
    candidate = path
    while candidate.exists():
        n += 1
        candidate = path.with_name(f"{path.name}.{n}")
    return candidate


def _write_synced(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)

"""The on-disk spool: accepted events that could not go to Kafka, kept in order across restarts.

Layout: `<root>/<owner>/<NNNNNNNNNNNN>.seg`, one directory per producer
process, each locked with `flock` for as long as its process lives. Records
are appended to the open segment with a single `os.write` each, so they
survive the process being killed (they are in the page cache the moment the
call returns). A segment is deleted only once every record in it has been
delivered, so a crash mid-drain replays the segment: at-least-once, and the
record headers (producer id + sequence) let a consumer drop the duplicates.

A new process adopts the directories of dead ones (their lock is free) and
drains them first, oldest first.
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

from rlmesh_stream.producer.records import Record, decode_records, encode_record

log = logging.getLogger(__name__)

_LOCK_NAME = ".lock"
_SUFFIX = ".seg"


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
        self.recovered = self._adopt_orphans()

    # -- start-up ----------------------------------------------------------

    def _adopt_orphans(self) -> int:
        """Queue the segments of every sibling directory whose process is gone."""
        siblings = [p for p in self.root.iterdir() if p.is_dir() and p != self.directory]
        recovered = 0
        for sibling in sorted(siblings, key=lambda p: p.stat().st_mtime):
            fd = _try_lock(sibling)
            if fd is None:
                continue  # a live producer owns it
            segments = sorted(sibling.glob("*" + _SUFFIX))
            if not segments:
                self._remove_dir(sibling, fd)
                continue
            self._adopted[sibling] = fd
            for path in segments:
                data = path.read_bytes()
                records, used = decode_records(data)
                if used < len(data):
                    log.warning("spool segment %s has %d trailing bytes that are not a whole "
                                "record (a write cut short by a crash); they are ignored",
                                path, len(data) - used)
                self._ready.append(_Segment(path, len(records), len(data)))
                self._count += len(records)
                self._bytes += len(data)
                recovered += len(records)
        if recovered:
            log.info("spool: %d events left by an earlier process will be delivered first",
                     recovered)
        return recovered

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
        records, _ = decode_records(segment.path.read_bytes())
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

"""Where accepted events wait when they cannot go to librdkafka yet, in accept order.

Two kinds: the on-disk `Spool` (overflow="spool") and this module's bounded
in-memory `MemoryBacklog` (used while the registry is unreachable and no
spool is configured). Both hand records out in batches; a batch is
`release`d once every record in it has an outcome, which is when a spool
may delete its file.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Protocol

from rlmesh_stream.producer.records import Record


class Batch(Protocol):
    records: list[Record]

    def release(self) -> None: ...


class Backlog(Protocol):
    """An ordered, bounded holding area for accepted records."""

    def put(self, record: Record) -> bool:
        """Hold a record; False when full (the caller then drops and counts it)."""
        ...

    def take(self) -> Batch | None:
        """The oldest records not yet handed out, or None when there are none."""
        ...

    def __len__(self) -> int:
        """Records held and not yet handed out."""
        ...

    @property
    def nbytes(self) -> int: ...

    def close(self) -> None: ...


class _MemoryBatch:
    __slots__ = ("records",)

    def __init__(self, records: list[Record]) -> None:
        self.records = records

    def release(self) -> None:
        """Nothing to clean up: the records only ever lived in memory."""


class MemoryBacklog:
    """A bounded FIFO in memory: holds at most `max_events` records."""

    def __init__(self, max_events: int, batch_size: int = 1000) -> None:
        self._max = max_events
        self._batch = batch_size
        self._items: deque[Record] = deque()
        self._bytes = 0
        self._lock = threading.Lock()

    def put(self, record: Record) -> bool:
        with self._lock:
            if len(self._items) >= self._max:
                return False
            self._items.append(record)
            self._bytes += len(record.payload)
            return True

    def take(self) -> _MemoryBatch | None:
        with self._lock:
            if not self._items:
                return None
            n = min(self._batch, len(self._items))
            records = [self._items.popleft() for _ in range(n)]
            self._bytes -= sum(len(r.payload) for r in records)
            return _MemoryBatch(records)

    def __len__(self) -> int:
        return len(self._items)

    @property
    def nbytes(self) -> int:
        return self._bytes

    def close(self) -> None:
        """Records still held are lost with the process; the hook counts them before closing."""

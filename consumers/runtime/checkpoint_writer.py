"""Writes checkpoints on a thread of their own, one at a time, while the runtime reads on.

A checkpoint's sink transaction (fencing the offsets, the upserts, the commit) runs
mostly in the database's own code, which releases the GIL (DuckDB, libpq): while it
runs, the runtime's thread reads and decodes the next records, on the other core.

At most one checkpoint is in flight, and the runtime waits for it (`finish`) before
anything else touches the sink: the next checkpoint, loading the stored offsets at an
assignment, a rewind, a revoke, the end of the run. So the sink still sees one
transaction at a time, in order, each holding its rows and its offsets: exactly once
holds as it did when the runtime wrote inline (docs/reliability.md).

A transient failure (a lost connection, a server restarting, a deadlock) is retried
with back-off for up to `SINK_OUTAGE_S`; any other failure, or one that outlasts that,
ends the run as a `SinkWriteError` saying what the store answered: the batch is read
again from the stored offsets by the next run, so nothing is lost or applied twice.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Generic, TypeVar

from rlmesh_stream.consumers.runtime.errors import SinkWriteError
from rlmesh_stream.consumers.sinks import OffsetConflict, Sink, SinkBatch
from rlmesh_stream.schemas.errors import RlmeshStreamError

log = logging.getLogger(__name__)

T = TypeVar("T")
ATTEMPTS = 5  # a dataset export's transient failures turned into re-reads in a row, at most
SINK_OUTAGE_S = 60.0
"""How long a checkpoint's transient failures are retried: a PostgreSQL restart or
failover takes seconds, and the Kafka consumer must poll again well within its
max.poll.interval.ms (300 s) or it leaves the group."""
BACKOFF_S = (0.2, 5.0)  # the first wait between attempts, doubling up to the second


@dataclass
class Written(Generic[T]):
    """The outcome of one checkpoint: committed, dropped by a fence, or failed."""

    batch: SinkBatch
    context: T  # what the runtime needs back to account for it
    committed_at: float = 0.0  # time.time() right after the commit
    finished: float = 0.0  # time.monotonic() when the transaction ended
    conflict: OffsetConflict | None = None  # another writer moved an offset: nothing applied
    error: BaseException | None = None  # anything else: nothing applied


class CheckpointWriter(Generic[T]):
    """One background writer of `SinkBatch`es into one sink."""

    def __init__(self, sink: Sink) -> None:
        self.sink = sink
        self._pool: ThreadPoolExecutor | None = None
        self._pending: Future[Written[T]] | None = None
        # a sink that reads its builders' state: transient failures turned into re-reads
        # in a row left before one is raised
        self._rereads_left = ATTEMPTS

    @property
    def busy(self) -> bool:
        """A checkpoint is in flight and not finished yet."""
        return self._pending is not None and not self._pending.done()

    def submit(self, batch: SinkBatch, context: T) -> None:
        """Start writing `batch`; the previous checkpoint must have been finished."""
        assert self._pending is None, "finish() the checkpoint in flight first"
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="rlmesh-sink")
        self._pending = self._pool.submit(self._write, batch, context)

    def finish(self, block: bool = True) -> Written[T] | None:
        """The checkpoint in flight once it has ended (each outcome is returned once), or
        None: nothing in flight, or (`block=False`) not ended yet."""
        pending = self._pending
        if pending is None or (not block and not pending.done()):
            return None
        self._pending = None
        return pending.result()

    def close(self) -> None:
        """Wait for the checkpoint in flight (its outcome is in the sink either way) and stop
        the thread."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        self._pending = None

    def _write(self, batch: SinkBatch, context: T) -> Written[T]:
        written = Written(batch, context)
        try:
            _apply(self.sink, batch, reread=self._rereads_left > 0)
            written.committed_at = time.time()
            self._rereads_left = ATTEMPTS
        except ReadAgain as exc:
            self._rereads_left -= 1
            written.conflict = exc
        except OffsetConflict as exc:
            written.conflict = exc
        except BaseException as exc:  # raised again on the runtime's thread
            written.error = exc
        written.finished = time.monotonic()
        return written


class ReadAgain(OffsetConflict):
    """A transient failure of a sink that reads its builders' state: read the batch again
    (the runtime rewinds, as after a fence) rather than apply it again."""


def _apply(sink: Sink, batch: SinkBatch, reread: bool = True) -> None:
    """One transaction, retried with back-off while the failure is transient, for up to
    `SINK_OUTAGE_S`; else a `SinkWriteError` (the sink's own errors, which say what to
    do already, as they are).

    Not retried by a sink that reads its builders' state (the dataset export): its failed
    apply took that state back to the committed one, so the batch's records are no longer
    in it, and applying the batch again stored its offsets without them (lost). Its
    transient failure is a `ReadAgain` instead (`reread`: while re-reads in a row are
    left)."""
    started = time.monotonic()
    wait = BACKOFF_S[0]
    while True:
        try:
            sink.apply(batch)
            return
        except OffsetConflict:
            raise
        except Exception as exc:
            transient = _transient(exc)
            if transient and sink.reads_builder_state and reread:
                raise ReadAgain(f"sink write failed ({exc}); reading again from the stored "
                                "offsets") from exc
            left = started + SINK_OUTAGE_S - time.monotonic()
            if not transient or sink.reads_builder_state or left <= 0:
                if isinstance(exc, RlmeshStreamError) and not transient:
                    raise
                raise _write_error(exc, time.monotonic() - started if transient else None
                                   ) from exc
            log.warning("sink write failed (%s); retrying in %.1f s (for up to %.0f s more)",
                        _said(exc), min(wait, left), left)
            time.sleep(min(wait, left))
            wait = min(wait * 2, BACKOFF_S[1])


def _write_error(exc: Exception, retried: float | None) -> SinkWriteError:
    """What the user reads when a checkpoint could not be written (`retried`: for how long
    a transient failure was retried)."""
    how = f", retried for {retried:.0f} s" if retried is not None else ""
    what = "the store's disk is full" if _disk_full(exc) else "the store did not take a checkpoint"
    return SinkWriteError(f"{what} ({_said(exc)}{how}): nothing of it was lost; run again "
                          "once the store can be written, to resume from the stored offsets")


def _said(exc: Exception) -> str:
    """`exc`'s message on one line (a driver's runs over several)."""
    return " ".join(line.strip() for line in str(exc).splitlines() if line.strip()) or (
        type(exc).__name__)


# What a store says when its disk (or the user's quota) is full: ENOSPC, EDQUOT, and
# PostgreSQL's DiskFull (SQLSTATE 53100), in the drivers' words.
_DISK_FULL = ("No space left on device", "Disk quota exceeded")


def _disk_full(exc: BaseException) -> bool:
    names = {c.__name__ for c in type(exc).__mro__}
    return "DiskFull" in names or any(words in str(exc) for words in _DISK_FULL)


def _transient(exc: Exception) -> bool:
    """A sink failure worth retrying: lost connection, deadlock, serialization failure;
    never a full disk (an OperationalError to both drivers), which seconds do not empty:
    the run stops at once saying so."""
    # by class name (no driver imported here), the class's or a base's: psycopg's
    # AdminShutdown (a terminated backend) is an OperationalError, as DuckDB's IOException
    if getattr(exc, "transient", False):  # a store that answered before is away
        return True
    if _disk_full(exc):
        return False
    names = {c.__name__ for c in type(exc).__mro__}
    return bool(names & {"OperationalError", "DeadlockDetected", "SerializationFailure",
                         "TransactionConflict"}) or "Conflict" in type(exc).__name__

"""Sequencing, headers and delivery accounting: how every accepted event is accounted for.

Every accepted event gets the next number of this producer's sequence,
stamped with the producer id in its `rlmesh.ps` header
(`schemas.headers`), so a consumer can detect a gap or a duplicate end to
end. The `Ledger` counts each event's outcome exactly once; `Stats` is a
consistent copy of it.

Delivery reports are asked for failures only (`delivery.report.only.error`):
a success costs no Python call. What was delivered is therefore derived:
every record handed to librdkafka is noted (`note_handed`, with its size),
every failed report is counted (`count_error`), and librdkafka holds the
rest (`len(producer)`), so delivered = handed - held - failed reports.

The invariant `stats()` keeps:
    accepted + recovered == delivered + failed + dropped + in_flight + spooled
where `recovered` counts events an earlier process left in the spool, those a damaged
segment lost included (they are also in `failed`, under `spool:<kind of damage>`).
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import KafkaError

from rlmesh_stream.producer.records import Headers
from rlmesh_stream.schemas.contract import headers as h

log = logging.getLogger(__name__)

# Delivery errors no retry can fix: the record itself or our rights are wrong.
PERMANENT_ERRORS: frozenset[int] = frozenset({
    KafkaError.MSG_SIZE_TOO_LARGE,
    KafkaError.INVALID_MSG,
    KafkaError.INVALID_MSG_SIZE,
    KafkaError.INVALID_RECORD,
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    KafkaError.INVALID_REQUIRED_ACKS,
})

# Delivery errors for a topic that is still being created or has no leader yet: a broker that
# just (re)started, a topic being auto-created, metadata not yet propagated. They go back to
# the backlog (spool or memory) and are retried, for a bounded time (the hook's
# `topic_wait_s`); a topic that never appears is then counted failed under the error's name.
TOPIC_NOT_READY_ERRORS: frozenset[int] = frozenset({
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError._UNKNOWN_TOPIC,
    KafkaError._UNKNOWN_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.NOT_LEADER_FOR_PARTITION,
})


def new_producer_id() -> str:
    """Unique per producer process (and per hook instance within it)."""
    return uuid.uuid4().hex


def record_sequence(headers: Headers) -> int:
    """The sequence number a record was stamped with (either version of the headers), or -1."""
    items = headers.items() if isinstance(headers, dict) else headers
    stamp = h.delivery_stamp({k: v for k, v in items if isinstance(v, bytes)})
    if stamp is None:
        return -1
    try:
        return h.parse_sequence(stamp[2])
    except ValueError:
        return -1


@dataclass(frozen=True)
class Stats:
    """A consistent snapshot of the producer's accounting."""

    producer_id: str
    accepted: int  # events this process took in (each got a sequence number)
    recovered: int  # events an earlier process left in the spool (lost to damage included)
    delivered: int  # acknowledged by Kafka
    failed: dict[str, int] = field(default_factory=dict)  # reason -> count; never delivered
    dropped: int = 0  # refused by the overflow policy (queue full, drop policy)
    in_flight: int = 0  # handed to librdkafka, no outcome yet
    spooled: int = 0  # waiting in the spool / held in memory, not yet handed to librdkafka
    spooled_total: int = 0  # events ever written to the spool or held
    delivered_bytes: int = 0  # value bytes acknowledged (see Ledger.delivered_bytes)
    queue_depth: int = 0  # messages in librdkafka's queue (incl. in flight)
    disabled: int = 0  # events skipped by a per-event-type switch (never accepted)
    leaves_omitted: int = 0  # events published without their leaves (size cap)
    spool_set_aside: int = 0  # damaged spool segments found at start-up, set aside (corrupt/)

    @property
    def failed_total(self) -> int:
        return sum(self.failed.values())

    @property
    def unresolved(self) -> int:
        """Accepted events with no final outcome yet (in flight or spooled)."""
        return self.in_flight + self.spooled


class Ledger:
    """The counters behind `Stats`, updated under one lock from every thread."""

    def __init__(self) -> None:
        # Reentrant: a SIGTERM handler may close the hook while this thread holds it.
        self.lock = threading.RLock()
        # Sequence numbers, one per accepted event: next() on a count is atomic in CPython, so
        # the hot path takes no lock for it, and the count is also the number accepted.
        self._sequence = itertools.count()
        # The count's own __next__, bound once: the hot path calls it per event.
        self.next_sequence: Callable[[], int] = self._sequence.__next__
        # The value size of every record handed to librdkafka, appended by the thread that
        # produced it (list.append is atomic, no lock) and folded into the totals under the
        # lock by whoever reads them.
        self._handed_sizes: list[int] = []
        self.note_handed: Callable[[int], None] = self._handed_sizes.append
        self._handed = self._handed_bytes = 0
        self._errors = self._error_bytes = 0  # delivery reports with an error
        self._delivered = self._delivered_bytes = 0  # never decrease (see `delivered`)
        self._queue_len: Callable[[], int] = lambda: 0  # records librdkafka holds
        self.recovered = 0
        self.failed: dict[str, int] = {}
        self.dropped = 0
        self.spooled_total = 0
        self.disabled = 0
        self.leaves_omitted = 0
        self.spool_set_aside = 0
        self._last_failure_log = 0.0
        self._suppressed = 0

    def watch_queue(self, queue_len: Callable[[], int]) -> None:
        """How many records librdkafka holds (`len(producer)`): handed, no report served yet."""
        self._queue_len = queue_len

    def count_error(self, nbytes: int) -> None:
        """A delivery report with an error (its record's fate is decided by the caller)."""
        with self.lock:
            self._errors += 1
            self._error_bytes += nbytes

    @property
    def delivered(self) -> int:
        """Records Kafka acknowledged: handed - held by librdkafka - failed reports.

        Read in that order, each term can only make the difference smaller than
        the truth (a record produced meanwhile is held but not yet noted; a
        failed report is counted before librdkafka lets go of its record), so
        it never counts a record that is not delivered; it is kept monotonic.
        Exact once librdkafka holds nothing.
        """
        with self.lock:
            sizes = self._handed_sizes
            n = len(sizes)
            if n:  # only this (locked) fold removes, and only from the front
                self._handed += n
                self._handed_bytes += sum(sizes[:n])
                del sizes[:n]
            delivered = self._handed - self._queue_len() - self._errors
            if delivered > self._delivered:
                self._delivered = delivered
            return self._delivered

    @property
    def delivered_bytes(self) -> int:
        """Value bytes acknowledged: exact once librdkafka holds nothing, else pro rata."""
        with self.lock:
            delivered = self.delivered
            ok = self._handed - self._errors
            ok_bytes = self._handed_bytes - self._error_bytes
            estimate = ok_bytes if delivered >= ok else ok_bytes * delivered // max(ok, 1)
            if estimate > self._delivered_bytes:
                self._delivered_bytes = estimate
            return self._delivered_bytes

    @property
    def accepted(self) -> int:
        """Events accepted so far: the next sequence number, read without consuming it."""
        return int(repr(self._sequence)[len("count("):-1])

    def outstanding(self) -> int:
        """Events with no final outcome yet; never too low while other threads count outcomes.

        The outcomes are read before `accepted`, so one counted meanwhile can only make the
        answer larger: a record between the backlog and librdkafka (taken by the drainer,
        not yet produced; or re-held from a delivery report) is never missed, as it can be
        by adding up the two queues' lengths.
        """
        with self.lock:
            outcomes = sum(self.failed.values()) + self.dropped
        outcomes += self.delivered
        return max(self.accepted + self.recovered - outcomes, 0)

    def fail(self, reason: str, count: int = 1) -> None:
        with self.lock:
            self.failed[reason] = self.failed.get(reason, 0) + count

    def log_failure(self, reason: str, detail: str) -> None:
        """Log a failure, at most once a second so an outage cannot flood the log."""
        now = time.monotonic()
        if now - self._last_failure_log >= 1.0:
            suppressed, self._suppressed = self._suppressed, 0
            self._last_failure_log = now
            log.error("rlmesh-stream: event not delivered (%s): %s%s", reason, detail,
                      f" (+{suppressed} more since the last message)" if suppressed else "")
        else:
            self._suppressed += 1

    def snapshot(self, producer_id: str, spooled: int, queue_depth: int) -> Stats:
        with self.lock:
            failed = dict(self.failed)
            failed_total = sum(failed.values())
            delivered, accepted = self.delivered, self.accepted
            in_flight = (accepted + self.recovered - delivered - failed_total - self.dropped
                         - spooled)
            return Stats(
                producer_id=producer_id, accepted=accepted, recovered=self.recovered,
                delivered=delivered, failed=failed, dropped=self.dropped,
                in_flight=max(in_flight, 0), spooled=spooled,
                spooled_total=self.spooled_total, delivered_bytes=self.delivered_bytes,
                queue_depth=queue_depth,
                disabled=self.disabled, leaves_omitted=self.leaves_omitted,
                spool_set_aside=self.spool_set_aside,
            )

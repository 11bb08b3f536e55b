"""Sequencing, headers and delivery accounting: how every accepted event is accounted for.

Every accepted event gets the next number of this producer's sequence and
four headers (event type, contract version, producer id, sequence), so a
consumer can detect a gap or a duplicate end to end. The `Ledger` counts
each event's outcome exactly once; `Stats` is a consistent copy of it.

The invariant `stats()` keeps:
    accepted + recovered == delivered + failed + dropped + in_flight + spooled
where `recovered` counts events an earlier process left in the spool.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError

from rlmesh_stream.producer.records import Headers
from rlmesh_stream.schemas import headers as h
from rlmesh_stream.schemas.topics import EventType

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


class HeaderFactory:
    """Builds a record's headers; the constant part is built once per event type."""

    __slots__ = ("_base", "producer_id")

    def __init__(self, producer_id: str) -> None:
        self.producer_id = producer_id
        pid = producer_id.encode("ascii")
        contract = h.CONTRACT_VERSION.encode("ascii")
        self._base: dict[EventType, Headers] = {
            et: [(h.EVENT_TYPE, et.value.encode("ascii")), (h.CONTRACT, contract),
                 (h.PRODUCER_ID, pid)]
            for et in EventType
        }

    def base(self, event_type: EventType) -> Headers:
        """The headers every record of this event type carries (the sequence comes after)."""
        return list(self._base[event_type])

    def headers(
        self, event_type: EventType, sequence: int, omitted_bytes: int | None = None
    ) -> Headers:
        out: Headers = [*self._base[event_type], (h.SEQUENCE, b"%d" % sequence)]
        if omitted_bytes is not None:
            out.append((h.LEAVES_OMITTED_BYTES, b"%d" % omitted_bytes))
        return out


def header_value(headers: Any, name: str) -> bytes | None:
    """A header's value from confluent-kafka's list (or dict) of headers, as bytes."""
    items = headers.items() if isinstance(headers, dict) else (headers or ())
    for key, value in items:
        if key == name:
            return value if isinstance(value, bytes) or value is None else str(value).encode()
    return None


@dataclass(frozen=True)
class Stats:
    """A consistent snapshot of the producer's accounting."""

    producer_id: str
    accepted: int  # events this process took in (each got a sequence number)
    recovered: int  # events an earlier process left in the spool, picked up by this one
    delivered: int  # acknowledged by Kafka
    failed: dict[str, int] = field(default_factory=dict)  # reason -> count; never delivered
    dropped: int = 0  # refused by the overflow policy (queue full, drop policy)
    in_flight: int = 0  # handed to librdkafka, no outcome yet
    spooled: int = 0  # waiting in the spool / held in memory, not yet handed to librdkafka
    spooled_total: int = 0  # events ever written to the spool or held
    delivered_bytes: int = 0  # value bytes acknowledged (see Ledger.count_delivered)
    queue_depth: int = 0  # messages in librdkafka's queue (incl. in flight)
    disabled: int = 0  # events skipped by a per-event-type switch (never accepted)
    leaves_omitted: int = 0  # events published without their leaves (size cap)

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
        self.recovered = 0
        self._delivered = itertools.count()
        self.failed: dict[str, int] = {}
        self.dropped = 0
        self.spooled_total = 0
        self.delivered_bytes = 0
        self.disabled = 0
        self.leaves_omitted = 0
        self._last_failure_log = 0.0
        self._suppressed = 0

    def count_delivered(self, nbytes: int) -> None:
        """One delivery report: lock-free, as it runs once per event on the poller thread.

        `delivered_bytes` is a plain add: exact with the one poller thread, approximate
        only while another thread's `flush` serves reports at the same time.
        """
        next(self._delivered)
        self.delivered_bytes += nbytes

    @property
    def delivered(self) -> int:
        return int(repr(self._delivered)[len("count("):-1])

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
            in_flight = (self.accepted + self.recovered - self.delivered - failed_total
                         - self.dropped - spooled)
            return Stats(
                producer_id=producer_id, accepted=self.accepted, recovered=self.recovered,
                delivered=self.delivered, failed=failed, dropped=self.dropped,
                in_flight=max(in_flight, 0), spooled=spooled,
                spooled_total=self.spooled_total, delivered_bytes=self.delivered_bytes,
                queue_depth=queue_depth,
                disabled=self.disabled, leaves_omitted=self.leaves_omitted,
            )

"""Where an accepted record goes when it is not simply handed to librdkafka: held, or failed.

`Outcomes` owns the backlog (the on-disk spool, or a bounded holding area
in memory) and the one flag the hot path reads to decide between holding
and producing (`active`: while the backlog holds anything, new events
queue behind it so order is kept). It also owns failures: a failure is
counted once in the ledger, logged (rate-limited) and handed to the
user's error callback. Every other component reports through it, so an
event's outcome is counted in exactly one place.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from rlmesh_stream.producer.backlog import Backlog
from rlmesh_stream.producer.config import DeliveryFailure, ProducerSettings
from rlmesh_stream.producer.delivery import Ledger
from rlmesh_stream.producer.records import Record
from rlmesh_stream.schemas.contract.topics import EventType

# The hook's components share one logger, so a user silences or raises the hook as one.
log = logging.getLogger("rlmesh_stream.producer.hooks")

DROP_LOG_INTERVAL_S = 1.0  # at most one line about drops per interval, with their counts


class Outcomes:
    """The backlog, the hold-new-events flag, and every failure's account."""

    def __init__(self, settings: ProducerSettings, ledger: Ledger, backlog: Backlog) -> None:
        self.settings = settings
        self.ledger = ledger
        self.backlog = backlog
        self.spooling = settings.overflow == "spool"
        self.lock = threading.RLock()  # reentrant for the SIGTERM handler
        # True while the backlog may hold anything: the hot path then holds new events too.
        self.active = len(backlog) > 0
        self.wake = threading.Event()  # tells the drainer there is something to drain
        self._on_error = settings.on_error
        self._drops: dict[str, int] = {}  # why -> events dropped since the last log line
        self._drops_said_at = -DROP_LOG_INTERVAL_S
        self._after_close_said = False

    # -- holding ------------------------------------------------------------------------------

    def hold(self, record: Record) -> None:
        """A new event that cannot go to librdkafka now: into the backlog, or counted dropped."""
        held = self.put(record)
        if held is None:
            return
        if held:
            with self.ledger.lock:
                self.ledger.spooled_total += 1
            self.wake.set()
            return
        self.drop("spool full" if self.spooling else "backlog full")

    def drop(self, why: str) -> None:
        """An accepted event the overflow policy drops: counted, and logged (rate-limited).

        `why` is "queue full" (librdkafka's queue stayed full past max_block_ms),
        "spool full" / "backlog full" (at `spool_max_bytes` / `held_max_events`), or
        "after close" (a callback after `close()`, logged once).
        """
        with self.ledger.lock:
            self.ledger.dropped += 1
            if why == "after close":
                if self._after_close_said:
                    return
                self._after_close_said = True
            else:
                self._drops[why] = self._drops.get(why, 0) + 1
                now = time.monotonic()
                if now - self._drops_said_at < DROP_LOG_INTERVAL_S:
                    return
                self._drops_said_at = now
        if why == "after close":
            log.warning("rlmesh-stream: an event arrived after close() and was dropped; every "
                        "later one is too (counted in stats().dropped, not logged again)")
        else:
            self.say_drops()

    def say_drops(self) -> None:
        """One line with the drops counted since the last one (if any)."""
        with self.ledger.lock:
            drops, self._drops = self._drops, {}
            total = self.ledger.dropped
        if drops:
            log.warning(
                "rlmesh-stream: %d events dropped (%s; overflow=%r, max_block_ms=%g, "
                "queue_max_messages=%d); %d dropped in total", sum(drops.values()),
                ", ".join(f"{n} {why}" for why, n in sorted(drops.items())),
                self.settings.overflow, self.settings.max_block_ms,
                self.settings.queue_max_messages, total)

    def put_back(self, record: Record, kafka_error: str) -> bool | None:
        """A record Kafka did not take (yet) goes back to the backlog: as `put`, counted held."""
        held = self.put(record, kafka_error=kafka_error)
        if held:
            with self.ledger.lock:
                self.ledger.spooled_total += 1
            self.wake.set()
        return held

    def put(self, record: Record, kafka_error: str | None = None) -> bool | None:
        """True when held, False when the backlog is full, None when the spool failed.

        A spool that cannot be written (disk full, directory removed) must not
        raise into the runtime: the event is counted failed with the OS error,
        and, when it was going back to the spool after a Kafka error, that
        error too (`kafka_error`), in the same log line.
        """
        try:
            with self.lock:
                ok = self.backlog.put(record)
                if ok:
                    self.active = True
                return ok
        except OSError as exc:
            detail = str(exc) if kafka_error is None else (
                f"Kafka did not take it ({kafka_error}) and writing it back to the spool "
                f"failed: {exc}")
            self.fail(record.event_type, record.key, record.sequence,
                      f"spool:{type(exc).__name__}", detail)
            return None

    def settle(self) -> None:
        """The drainer found the backlog empty: new events may go straight to librdkafka."""
        with self.lock:
            if len(self.backlog) == 0:
                self.active = False

    def full_reason(self) -> str:
        """Why a record could not go back to the backlog, for a failure's log line."""
        if self.spooling:
            return (f"the spool {self.settings.spool_dir} is full (spool_max_bytes="
                    f"{self.settings.spool_max_bytes})")
        return ("the in-memory backlog is full (held_max_events="
                f"{self.settings.held_max_events})")

    def where(self, memory_bound: int) -> str:
        """Where events wait while Kafka or the registry cannot take them, for a log line."""
        if self.spooling:
            return f"spool {self.settings.spool_dir}"
        return f"in memory, up to {memory_bound}"

    # -- failures -----------------------------------------------------------------------------

    def fail(self, et: EventType | str, key: bytes, seq: int, reason: str, detail: str) -> None:
        """An accepted event that will never reach Kafka: counted, logged, called back.

        `et` is the event type, or what was given instead of an event (`publish(None)`).
        """
        name = et if isinstance(et, str) else et.value
        self.ledger.fail(reason)
        self.ledger.log_failure(reason, f"{name} seq={seq}: {detail}")
        if self._on_error is not None:
            try:
                self._on_error(DeliveryFailure(name, key.decode("utf-8", "replace"), seq,
                                               reason))
            except Exception:
                log.exception("rlmesh-stream: the error callback raised")

    def reject(self, et: EventType | str, event: Any, exc: Exception) -> None:
        """An event the contract cannot carry: accepted, then failed with its reason."""
        seq = self.ledger.next_sequence()
        session = getattr(event, "session_id", "?")
        self.fail(et, str(session).encode("utf-8", "replace"), seq,
                  f"contract:{type(exc).__name__}", str(exc))

"""After produce(): delivery reports, Kafka's reachability, the backlog drainer, topic retries.

`Drainer` owns the librdkafka producer's background side:
* the poller thread, which serves delivery reports (so does the publishing
  thread every 256 events while Kafka answers, `serve_inline`). Only
  failures are reported (`delivery.report.only.error`: a delivered record
  costs no Python call); a failed record goes back to the backlog when a
  retry can help (spool, or a topic not ready yet), else is counted failed.
  Deliveries are counted by the ledger (handed - held by librdkafka -
  failed), and the poller notices them after each poll (Kafka answers again);
* whether Kafka is reachable (from librdkafka's error callback, failed
  deliveries and metadata probes); it says so once at WARNING, with where
  the events are (on disk in the spool, or in memory) and how many;
* with a spool, an outage moves every event to disk: once Kafka is known
  unreachable (all brokers down, or records timing out) new events are
  held in the spool, and what librdkafka holds in memory is purged from it
  and written there by the purged records' delivery reports (same headers,
  so same sequence numbers). A SIGKILL during an outage then loses only the
  records in flight to the broker when it went away;
* the drainer thread, which first learns the schema ids (with back-off),
  then feeds the backlog to librdkafka in order, once Kafka answers. A
  batch (a spool segment) is released once librdkafka holds nothing after
  it was produced: every record in it then has its outcome;
* topic-not-ready retries: a record for a topic Kafka does not know yet
  (being created) or without a leader goes back to the backlog and is
  produced again after a metadata refresh, for at most `topic_wait_s`.
"""

from __future__ import annotations

import logging
import threading
import time
from types import MethodType
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from rlmesh_stream.producer.backlog import Batch
from rlmesh_stream.producer.config import ProducerSettings
from rlmesh_stream.producer.delivery import (
    PERMANENT_ERRORS,
    TOPIC_NOT_READY_ERRORS,
    Ledger,
    record_sequence,
)
from rlmesh_stream.producer.outcomes import Outcomes
from rlmesh_stream.producer.records import Headers, Record
from rlmesh_stream.producer.schema_ids import SchemaIdResolver
from rlmesh_stream.schemas.connection import access
from rlmesh_stream.schemas.contract import headers as h
from rlmesh_stream.schemas.contract.topics import EventType
from rlmesh_stream.schemas.errors import RlmeshStreamError

log = logging.getLogger("rlmesh_stream.producer.hooks")
_ACCESS_LOG = access.RateLimitedLog()  # auth errors repeat on every reconnect

_POLL_INTERVAL_S = 0.05
# After a record went back to the backlog because its topic was not ready: how long the
# drainer waits before asking for the topic's metadata again and retrying.
_TOPIC_RETRY_S = 1.0
_UNREACHABLE = (KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT, KafkaError._RESOLVE)
# How often, during an outage with a spool, what librdkafka holds is moved to the spool again
# (records it retries after a broken connection come back into its queue).
_SPILL_INTERVAL_S = 0.25


class _Yield(RlmeshStreamError):
    """Raised by a failure's report served inline: stops serving, librdkafka keeps the rest."""


class Drainer:
    """The producer's background threads and what they decide about each record's fate."""

    def __init__(self, settings: ProducerSettings, ledger: Ledger, outcomes: Outcomes,
                 resolver: SchemaIdResolver, topics: dict[EventType, str],
                 thread_tag: str) -> None:
        self.settings = settings
        self._bootstrap = access.redact_url(settings.stream.bootstrap)  # for log lines
        self._ledger = ledger
        self._outcomes = outcomes
        self._resolver = resolver
        self._topics = topics
        self._event_types = {topic: et for et, topic in topics.items()}
        self._delivered_seen = 0  # the ledger's delivered count when the poller last looked
        # Batches fully produced whose records may still lack an outcome (see release_settled).
        self._unsettled: list[Batch] = []
        self._unsettled_lock = threading.Lock()
        self._error_topics: set[str] = set()  # topics of records refused or failed meanwhile
        self.stop_event = threading.Event()
        # False from a failed delivery / all brokers down until a delivery succeeds: the drainer
        # then leaves the spool alone (probing instead) so records do not cycle disk <-> memory.
        self.kafka_ok = True
        self._unreachable_logged = False
        # True while Kafka is known unreachable (all brokers down, or records timing out) and
        # no delivery or metadata request has succeeded since: with a spool, events then go to
        # disk (`_spill`), not into librdkafka's memory.
        self.outage = False
        self._outage_name = self._outage_error = ""  # the error that began the outage
        self._spill_at = 0.0  # when the poller next moves librdkafka's queue to the spool
        self._moved = 0  # records moved from librdkafka's memory to the spool in this outage
        self._outage_said = False
        self._spills = 0  # passes of `_spill` in this outage
        # Topics Kafka answered "unknown topic" / "no leader" for: topic -> [first, last] time of
        # the current run of such errors. A record for one goes back to the backlog until the
        # run is `topic_wait_s` old, then is counted failed. A delivery to it ends the run.
        self._topic_wait_s = settings.topic_wait_s
        self._topic_trouble: dict[str, list[float]] = {}
        self._topic_retry_at = 0.0  # when the drainer next retries after a topic error
        self._inline = threading.local()  # `serving`: this thread is in `serve_inline`

        conf = settings.kafka_config()
        conf["error_cb"] = self.on_kafka_error
        # Successes are counted without a report (see the module docstring).
        conf["delivery.report.only.error"] = True
        # librdkafka's own log lines go to Python logging, not straight to the rollout's stderr.
        conf.setdefault("logger", _LibrdkafkaLog())
        self.producer = Producer(conf)
        ledger.watch_queue(self.producer.__len__)
        self._poller = threading.Thread(target=self._poll_loop,
                                        name=f"rlmesh-stream-poll-{thread_tag}", daemon=True)
        self._drainer = threading.Thread(target=self._drain_loop,
                                         name=f"rlmesh-stream-drain-{thread_tag}", daemon=True)

    def start(self) -> None:
        self._poller.start()
        self._drainer.start()

    def stop_draining(self, timeout: float) -> None:
        """Stop the drainer thread (waiting up to `timeout` s); the poller goes on serving."""
        self.stop_event.set()
        self._outcomes.wake.set()
        self._drainer.join(timeout=timeout)

    def stop_polling(self, timeout: float) -> None:
        self._poller.join(timeout=timeout)

    # -- delivery reports (poller thread, or whoever calls flush) -------------------------------

    def on_delivery(self, headers: Headers | bytes, err: KafkaError | None,
                    msg: Message) -> None:
        """A failed record's report (successes are not reported, see the module docstring).

        `headers` is what the record was produced with, or its `rlmesh.ps` stamp alone
        (the hook binds only that when it is all the headers hold).
        """
        if err is None:
            return
        self._ledger.count_error(len(msg))
        self._delivery_failed(
            {h.PRODUCER_SEQUENCE: headers} if isinstance(headers, bytes) else headers, err, msg)
        if getattr(self._inline, "serving", False):
            # Served by the publishing thread (`serve_inline`): one failure's account is all it
            # takes on; librdkafka puts the remaining reports back for the poller thread.
            raise _Yield

    def serve_inline(self) -> None:
        """Serve the delivery reports that are ready, from the publishing thread.

        confluent-kafka takes the GIL for every report, success or not, to free the
        record's callback. From the poller thread that is a GIL hand-off per record
        while the publishing thread runs, and the callbacks live on, long enough to
        reach the garbage collector's old generation and trigger full collections.
        Served here (every 256 events, `publisher`), they cost neither (the hook's CPU
        per event fell from ~4.2x a bare `produce` to ~3.7x). Only while Kafka answers, and at most
        one failure is handled here (`on_delivery` then yields): a burst of failures
        never lands on the rollout's thread. Never raises.
        """
        if not self.kafka_ok or self.outage:
            return
        inline = self._inline
        inline.serving = True
        try:
            self.producer.poll(0)
        except _Yield:
            pass
        except Exception:
            log.exception("rlmesh-stream: delivery report handling failed")
        finally:
            inline.serving = False

    def _delivered_again(self) -> None:
        """The poller saw the delivered count grow: Kafka takes records (again)."""
        delivered = self._ledger.delivered
        if delivered == self._delivered_seen:
            return
        self._delivered_seen = delivered
        self.kafka_ok = True
        if self._unreachable_logged or self.outage:
            self._answers_again()

    def _delivery_failed(self, headers: Headers, err: KafkaError, msg: Message) -> None:
        topic = msg.topic() or ""
        self._error_topics.add(topic)
        et = self._event_types[topic]
        seq = record_sequence(headers)
        key = msg.key() or b""
        code = err.code()
        if code in TOPIC_NOT_READY_ERRORS:
            record = Record(et, key, msg.value() or b"", True, headers, seq)
            self.topic_not_ready(record, topic, err)
            return
        name = err.name()
        if code == KafkaError._PURGE_QUEUE and self.outage:
            # Moved to the spool below, by `_spill`: what went wrong is the outage.
            self._moved += 1
            name, detail = self._outage_name, f"Kafka unreachable: {self._outage_error}"
        else:
            if code not in PERMANENT_ERRORS:
                self.kafka_ok = False
                if code == KafkaError._MSG_TIMED_OUT:
                    self._outage_begins(err)
            detail = access.kafka_access_message(
                self.settings.stream, err, operation="write to", topic=topic) or err.str()
        if self._outcomes.spooling and code not in PERMANENT_ERRORS:
            record = Record(et, key, msg.value() or b"", True, headers, seq)
            held = self._outcomes.put_back(record, kafka_error=f"{name}: {detail}")
            if held is None or held:
                return  # held, or counted failed by put_back with both errors
            detail = f"{detail}; it could not go back to the spool: {self._outcomes.full_reason()}"
        self._outcomes.fail(et, key, seq, name, detail)

    def on_kafka_error(self, err: KafkaError) -> None:
        code = err.code()
        denied = access.kafka_access_message(self.settings.stream, err, operation="write to")
        if denied is not None:  # name the principal, not just "authentication failed"
            _ACCESS_LOG.error(log, denied)
            return
        if code == KafkaError._ALL_BROKERS_DOWN:
            self._outage_begins(err)
        if code in _UNREACHABLE and not self._unreachable_logged:
            self.kafka_ok = False
            self._unreachable_logged = True
            if not self._outcomes.spooling:
                log.warning(
                    "rlmesh-stream: Kafka at %s is unreachable (%s); events are held in "
                    "memory (librdkafka's queue: %d now, up to %d; lost if the process dies) "
                    "and delivered when it answers", self._bootstrap, err.str(),
                    len(self.producer), self.settings.queue_max_messages)
            # With a spool, the poller says where the events are once it has moved them.
        elif err.fatal():
            log.error("rlmesh-stream: fatal producer error: %s", err.str())
        elif code not in _UNREACHABLE:
            log.debug("rlmesh-stream: producer error: %s", err.str())

    # -- outages ---------------------------------------------------------------------------------

    def _outage_begins(self, err: KafkaError) -> None:
        self.kafka_ok = False
        if not self.outage:
            self.outage = True
            self._outage_name, self._outage_error = err.name(), err.str()
            self._moved = 0
            self._outage_said = False
            self._spill_at = 0.0
            self._spills = 0

    def _answers_again(self) -> None:
        said = self._outage_said or (self._unreachable_logged and not self._outcomes.spooling)
        self._unreachable_logged = self._outage_said = self.outage = False
        if said:
            where = (f" ({len(self._outcomes.backlog)} in the spool)"
                     if self._outcomes.spooling else "")
            log.warning("rlmesh-stream: Kafka answers again; delivering held events%s", where)

    def _spill(self) -> None:
        """Kafka is unreachable and there is a spool: events go to disk, none stays in memory.

        New events are held (the hot path sees `active`); librdkafka's queue is
        purged, and each purged record's delivery report (`_delivery_failed`,
        served by the next poll) writes it to the spool with its own headers.
        Records in flight to a broker are left alone: purging them could
        duplicate one the broker did write; when their connection breaks
        librdkafka queues them again and the next pass moves them.
        """
        now = time.monotonic()
        if now < self._spill_at:
            return
        self._spill_at = now + _SPILL_INTERVAL_S
        with self._outcomes.lock:
            self._outcomes.active = True
        if len(self.producer):
            self.producer.purge(in_queue=True, in_flight=False, blocking=True)
        self._spills += 1
        # Said after the second pass: the first one's purged records are in the spool by then.
        if self._spills >= 2 and not self._outage_said:
            self._outage_said = True
            log.warning(
                "rlmesh-stream: Kafka at %s is unreachable (%s); events are kept on disk in the "
                "spool %s (%d there, %d of them moved from librdkafka's memory; %d still in "
                "memory) and delivered when it answers", self._bootstrap,
                self._outage_error, self.settings.spool_dir, len(self._outcomes.backlog),
                self._moved, len(self.producer))

    # -- records librdkafka refused or could not place ------------------------------------------

    def refused(self, record: Record, exc: KafkaException) -> None:
        """librdkafka refused a record at produce(): retry a topic not ready yet, else fail."""
        err = exc.args[0] if exc.args else None
        self._error_topics.add(self._topics[record.event_type])
        if isinstance(err, KafkaError) and err.code() in TOPIC_NOT_READY_ERRORS:
            self.topic_not_ready(record, self._topics[record.event_type], err)
            return
        self._outcomes.fail(record.event_type, record.key, record.sequence, _reason(exc),
                            str(exc))

    def topic_not_ready(self, record: Record, topic: str, err: KafkaError) -> None:
        """Kafka does not know the record's topic (yet) or it has no leader: hold and retry.

        A broker that just started, or a topic being auto-created, answers like
        this for a while; the record goes back to the backlog (spool, or memory
        without one) and is produced again, with its own sequence number, so it
        lands once. Bounded: once the topic has answered like this for
        `topic_wait_s`, its records are counted failed under the error's name.
        """
        now = time.monotonic()
        with self._ledger.lock:
            run = self._topic_trouble.get(topic)
            if run is None or now - run[1] > self._topic_wait_s:
                run = self._topic_trouble[topic] = [now, now]  # a new run of errors
            run[1] = now
            waited = now - run[0]
        name = err.name()
        if waited < self._topic_wait_s:
            held = self._outcomes.put_back(record, kafka_error=f"{name}: {err.str()}")
            if held is None:
                return  # counted failed, with both errors
            if held:
                self.kafka_ok = False
                self._topic_retry_at = now + _TOPIC_RETRY_S
                return
            detail = (f"topic {topic!r} is not ready ({err.str()}) and the record could not "
                      f"be held for a retry: {self._outcomes.full_reason()}")
        else:
            detail = (f"topic {topic!r} still unavailable {waited:.0f} s after Kafka first "
                      f"answered {name} for it ({err.str()}): it does not exist and is not "
                      f"being auto-created, or has no leader; create it "
                      f"(`rlmesh-stream topics create`) or check the brokers")
        self._outcomes.fail(record.event_type, record.key, record.sequence, name, detail)

    # -- background threads ---------------------------------------------------------------------

    def _poll_loop(self) -> None:
        while not (self.stop_event.is_set() and not self._drainer.is_alive()):
            try:
                self.producer.poll(_POLL_INTERVAL_S)
                self._delivered_again()
                if self.outage and self._outcomes.spooling:
                    self._spill()
            except Exception:
                log.exception("rlmesh-stream: delivery report handling failed")

    def _drain_loop(self) -> None:
        stop, outcomes, resolver = self.stop_event, self._outcomes, self._resolver
        while not stop.is_set():
            if not resolver.ready.is_set() and not resolver.resolve():
                # Drain what is already framed even while the registry is away.
                stop.wait(resolver.backoff())
                continue
            if not outcomes.active:
                outcomes.wake.wait(0.2)
                outcomes.wake.clear()
                continue
            if self._topic_retry_at:
                wait = self._topic_retry_at - time.monotonic()
                if wait > 0:
                    stop.wait(min(wait, 0.2))
                    continue
                self._topic_retry_at = 0.0
                self._refresh_topics()
            if not self.kafka_ok and not self._probe_kafka():
                stop.wait(1.0)
                continue
            batch = outcomes.backlog.take()
            if batch is None:
                outcomes.settle()
                continue
            self._drain_batch(batch)

    def _drain_batch(self, batch: Batch) -> None:
        producer, report, handed = self.producer, self.on_delivery, self._ledger.note_handed
        prefixes = self._resolver.prefixes
        self._error_topics.clear()
        for record in batch.records:
            value = record.payload
            if not record.framed:
                value = prefixes[record.event_type] + value
            topic = self._topics[record.event_type]
            while True:
                try:
                    producer.produce(topic, value, record.key, -1,
                                     MethodType(report, record.headers), None, 0, record.headers)
                    handed(len(value))
                    break
                except BufferError:
                    if self.stop_event.is_set():
                        # Closing: the spool file stays (replayed by the next process).
                        return
                    time.sleep(0.005)
                except KafkaException as exc:
                    self.refused(record if record.framed else Record(
                        record.event_type, record.key, value, True, record.headers,
                        record.sequence), exc)
                    break
        with self._unsettled_lock:
            self._unsettled.append(batch)
        # Wait for every record's outcome (a spool segment is deleted only then), so the
        # batch's topics that had no failure since are known to take records again.
        while len(producer) and not self.stop_event.is_set():
            self.stop_event.wait(0.005)
        if self.release_settled():
            for topic in {self._topics[r.event_type] for r in batch.records} - self._error_topics:
                self._topic_trouble.pop(topic, None)

    def release_settled(self) -> bool:
        """Release the produced batches once librdkafka holds nothing; True when it held nothing.

        Failures are the only delivery reports, so a batch cannot count its
        records' outcomes; but a record stays in librdkafka's count until its
        report (a failure's included) has been served, so once the count is 0
        every batch produced before has all its outcomes.
        """
        if len(self.producer):
            return False
        with self._unsettled_lock:
            settled, self._unsettled = self._unsettled, []
        for batch in settled:
            batch.release()
        return True

    def _refresh_topics(self) -> None:
        """Ask for the metadata of the topics that were not ready, so librdkafka sees them again.

        librdkafka remembers a topic as nonexistent and fails its records at once
        until its next periodic refresh (minutes); asking for one topic by name
        refreshes it now (and lets a broker that auto-creates topics create it).
        """
        for topic in list(self._topic_trouble):
            try:
                self.producer.list_topics(topic=topic, timeout=1.0)
            except Exception:
                log.debug("rlmesh-stream: metadata of %s not available yet", topic,
                          exc_info=True)

    def _probe_kafka(self) -> bool:
        """Does a broker answer a metadata request? Then the held events can go."""
        try:
            metadata = self.producer.list_topics(timeout=1.0)
        except Exception:
            return False
        self.kafka_ok = bool(metadata.brokers)
        if self.kafka_ok and self.outage:
            self._answers_again()
        return self.kafka_ok


class _LibrdkafkaLog:
    """librdkafka's log lines, at DEBUG: an outage would otherwise print one per retry.

    The hook itself says once, at WARNING, when Kafka or the registry is unreachable.
    """

    _log = logging.getLogger("rlmesh_stream.librdkafka")

    def log(self, level: int, fmt: str, *args: Any) -> None:
        self._log.debug(fmt, *args)


def _reason(exc: KafkaException) -> str:
    err = exc.args[0] if exc.args else None
    return err.name() if isinstance(err, KafkaError) else type(exc).__name__

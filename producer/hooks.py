"""`KafkaRuntimeHooks`: the rlmesh runtime's observer, publishing every event to Kafka.

The hook runs inline in every rollout, so a callback only encodes, stamps
headers and enqueues into librdkafka; network I/O happens on librdkafka's
threads and delivery reports are served by a poller thread of ours. A
callback never raises into the runtime and never waits longer than
`max_block_ms` (plus the bounded flushes at session end).

Events that cannot be enqueued right now (librdkafka's bounded queue is
full, or the schema registry has not answered yet) go to the backlog: the
on-disk spool, or a bounded in-memory holding area. While the backlog holds
anything, new events queue behind it so order is kept; a drainer thread
feeds it to librdkafka as soon as Kafka and the registry answer.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from rlmesh_stream.producer import lifecycle, metrics
from rlmesh_stream.producer.backlog import Backlog, Batch, MemoryBacklog
from rlmesh_stream.producer.config import DeliveryFailure, ProducerSettings
from rlmesh_stream.producer.delivery import (
    PERMANENT_ERRORS,
    TOPIC_NOT_READY_ERRORS,
    HeaderFactory,
    Ledger,
    Stats,
    header_value,
    new_producer_id,
)
from rlmesh_stream.producer.encoding import (
    PayloadEncoder,
    SchemaIds,
    direct_encoders,
    frame_prefix,
    make_encoder,
    make_registrar,
)
from rlmesh_stream.producer.records import Headers, Record
from rlmesh_stream.producer.spool import Spool
from rlmesh_stream.schemas import access
from rlmesh_stream.schemas import events as ev
from rlmesh_stream.schemas import headers as h
from rlmesh_stream.schemas.config import StreamConfig
from rlmesh_stream.schemas.topics import EVENT_TYPES, EventType

log = logging.getLogger(__name__)
_ACCESS_LOG = access.RateLimitedLog()  # auth errors repeat on every reconnect

_SEQUENCE = h.SEQUENCE
_POLL_INTERVAL_S = 0.05
_FULL_RETRY_SLEEP_S = 0.0005
_REGISTRY_BACKOFF_S = (0.2, 0.5, 1.0, 2.0, 5.0)
# After a record went back to the backlog because its topic was not ready: how long the
# drainer waits before asking for the topic's metadata again and retrying.
_TOPIC_RETRY_S = 1.0
_INDEX: dict[EventType, int] = {et: i for i, et in enumerate(EVENT_TYPES)}
(_ENV_CONNECTED, _MODEL_CONNECTED, _SESSION_STARTED, _SESSION_ENDED, _SESSION_FAILED, _LOG,
 _EPISODE_STARTED, _EPISODE_COMPLETED, _ACTION_RECEIVED, _STEP_COMPLETED, _OBSERVATION_EMITTED,
 _RELAY_ADVISORY, _TELEMETRY_SNAPSHOT) = (_INDEX[EventType[name]] for name in (
    "ENV_CONNECTED", "MODEL_CONNECTED", "SESSION_STARTED", "SESSION_ENDED", "SESSION_FAILED",
    "LOG", "EPISODE_STARTED", "EPISODE_COMPLETED", "ACTION_RECEIVED", "STEP_COMPLETED",
    "OBSERVATION_EMITTED", "RELAY_ADVISORY", "TELEMETRY_SNAPSHOT"))
_LEAF_EVENTS = {
    EventType.OBSERVATION_EMITTED: ("observation", "raw_observation"),
    EventType.ACTION_RECEIVED: ("action", "raw_action"),
}


class KafkaRuntimeHooks:
    """Publishes rlmesh runtime events to one Kafka topic per event type, keyed by session id.

    Build it with keyword arguments, a `StreamConfig` (`config=`), full
    `ProducerSettings` (`settings=`), or from the environment
    (`KafkaRuntimeHooks.from_env()`, `RLMESH_STREAM_*`). Any
    `ProducerSettings` field can be passed as a keyword override.

    Thread-safe. From asyncio code the callbacks may be called directly: they
    never do network I/O and return within `max_block_ms`; `aflush` and
    `aclose` are the awaitable forms of the two calls that wait.
    """

    def __init__(
        self,
        bootstrap_servers: str | None = None,
        schema_registry_url: str | None = None,
        topic_prefix: str | None = None,
        format: str | None = None,
        *,
        config: StreamConfig | None = None,
        settings: ProducerSettings | None = None,
        encoder: PayloadEncoder | None = None,
        registrar: SchemaIds | None = None,
        startup_wait_s: float = 2.0,
        **overrides: Any,
    ) -> None:
        if settings is None:
            stream = config if config is not None else StreamConfig.from_env()
            explicit: dict[str, Any] = {
                "bootstrap": bootstrap_servers, "registry_url": schema_registry_url,
                "topic_prefix": topic_prefix}
            stream = dataclasses.replace(
                stream, **{k: v for k, v in explicit.items() if v is not None})
            if format is not None:
                overrides["format"] = format
            settings = ProducerSettings.from_env(stream=stream, **overrides)
        elif overrides or format is not None:
            settings = settings.with_overrides(
                **overrides, **({"format": format} if format is not None else {}))
        self.settings = settings
        self.producer_id = new_producer_id()
        self._headers = HeaderFactory(self.producer_id)
        self._ledger = Ledger()
        self._encoder = encoder if encoder is not None else make_encoder(settings.format)
        direct = direct_encoders(settings.format) if encoder is None else {}
        self._registrar = registrar
        self._prefixes: dict[EventType, bytes] = {}
        prefix = settings.stream.topic_prefix
        self._topics = {et: et.topic(prefix) for et in EventType}
        self._disabled = settings.disabled_events
        self._leaf_cap = settings.leaves_max_bytes
        self._slots = [
            _Slot(et, self._topics[et], et not in self._disabled, self._headers.base(et),
                  _LEAF_EVENTS.get(et) if self._leaf_cap is not None else None,
                  self._leaf_cap or 0, direct.get(et))
            for et in EVENT_TYPES
        ]
        # Bound once: the hot path calls them per event.
        self._encode = self._encoder.encode
        self._next_sequence = self._ledger.next_sequence
        self._report = self._on_delivery
        self._count_delivered = self._ledger.count_delivered
        self._max_block_s = settings.max_block_ms / 1000.0
        self._on_error = settings.on_error

        self._backlog: Backlog
        if settings.overflow == "spool":
            assert settings.spool_dir is not None
            spool = Spool(settings.spool_dir, self.producer_id, max_bytes=settings.spool_max_bytes)
            self._ledger.recovered = spool.recovered
            self._backlog = spool
        else:
            self._backlog = MemoryBacklog(settings.held_max_events)
        self._spooling = settings.overflow == "spool"
        self._hold_lock = threading.RLock()  # reentrant for the SIGTERM handler
        self._backlog_active = len(self._backlog) > 0
        self._wake = threading.Event()
        self._shedding = False
        self._closed = False
        self._stop = threading.Event()
        self._kafka_unreachable_logged = False
        # False from a failed delivery / all brokers down until a delivery succeeds: the drainer
        # then leaves the spool alone (probing instead) so records do not cycle disk <-> memory.
        self._kafka_ok = True
        self._registry_unreachable_logged = False
        self._registry_refused_logged = False
        self._ids_ready = threading.Event()
        # Topics Kafka answered "unknown topic" / "no leader" for: topic -> [first, last] time of
        # the current run of such errors. A record for one goes back to the backlog until the
        # run is `topic_wait_s` old, then is counted failed. A delivery to it ends the run.
        self._topic_wait_s = settings.topic_wait_s
        self._topic_trouble: dict[str, list[float]] = {}
        self._topic_retry_at = 0.0  # when the drainer next retries after a topic error

        conf = settings.kafka_config()
        conf["error_cb"] = self._on_kafka_error
        # librdkafka's own log lines go to Python logging, not straight to the rollout's stderr.
        conf.setdefault("logger", _LibrdkafkaLog())
        self._producer = Producer(conf)
        self._produce_now = self._producer.produce

        self._poller = threading.Thread(
            target=self._poll_loop, name=f"rlmesh-stream-poll-{self.producer_id[:8]}",
            daemon=True)
        self._drainer = threading.Thread(
            target=self._drain_loop, name=f"rlmesh-stream-drain-{self.producer_id[:8]}",
            daemon=True)
        self._poller.start()
        self._drainer.start()
        if startup_wait_s > 0:
            self._ids_ready.wait(startup_wait_s)
        lifecycle.register(self, signals=settings.install_exit_handlers)
        self.metrics_server = metrics.serve(self)  # on settings.metrics_port, when set

    # -- construction helpers ----------------------------------------------------------------

    @classmethod
    def from_env(cls, **overrides: Any) -> KafkaRuntimeHooks:
        """Everything from `RLMESH_STREAM_*`; keyword overrides win."""
        return cls(**overrides)

    @classmethod
    def from_config(cls, config: StreamConfig, **overrides: Any) -> KafkaRuntimeHooks:
        return cls(config=config, **overrides)

    # -- the runtime's callbacks --------------------------------------------------------------

    def env_connected(self, event: ev.EnvConnectedEvent) -> None:
        self._publish(self._slots[_ENV_CONNECTED], event)

    def model_connected(self, event: ev.ModelConnectedEvent) -> None:
        self._publish(self._slots[_MODEL_CONNECTED], event)

    def session_started(self, event: ev.SessionStartedEvent) -> None:
        self._publish(self._slots[_SESSION_STARTED], event)

    def episode_started(self, event: ev.EpisodeStartedEvent) -> None:
        self._publish(self._slots[_EPISODE_STARTED], event)

    def episode_completed(self, event: ev.EpisodeCompletedEvent) -> None:
        self._publish(self._slots[_EPISODE_COMPLETED], event)

    def action_received(self, event: ev.ActionReceivedEvent) -> None:
        self._publish(self._slots[_ACTION_RECEIVED], event)

    def transform_action(self, event: ev.ActionReceivedEvent) -> list[bytes] | None:
        """An observer, not a transformer: the action leaves go on unchanged."""
        return event.action

    def step_completed(self, event: ev.StepCompletedEvent) -> None:
        self._publish(self._slots[_STEP_COMPLETED], event)

    def observation_emitted(self, event: ev.ObservationEmittedEvent) -> None:
        self._publish(self._slots[_OBSERVATION_EMITTED], event)

    def transform_observation(self, event: ev.ObservationEmittedEvent) -> list[bytes] | None:
        """An observer, not a transformer: the observation leaves go on unchanged."""
        return event.observation

    def session_ended(self, event: ev.SessionEndedEvent) -> None:
        self._publish(self._slots[_SESSION_ENDED], event)
        self.flush(self.settings.session_end_flush_timeout_s)

    def on_telemetry(self, event: ev.TelemetrySnapshotEvent) -> None:
        self._publish(self._slots[_TELEMETRY_SNAPSHOT], event)

    def session_failed(self, event: ev.SessionFailedEvent) -> None:
        self._publish(self._slots[_SESSION_FAILED], event)
        self.flush(self.settings.session_end_flush_timeout_s)

    def log(self, event: ev.LogEvent) -> None:
        self._publish(self._slots[_LOG], event)

    def relay_advisory(self, event: ev.RelayAdvisoryEvent) -> None:
        self._publish(self._slots[_RELAY_ADVISORY], event)

    def publish(self, event: ev.RuntimeEvent) -> None:
        """Any runtime event, dispatched by its type (for callers that hold a union)."""
        et = EventType.of(event)
        self._publish(self._slots[_INDEX[et]], event)
        if et is EventType.SESSION_ENDED or et is EventType.SESSION_FAILED:
            self.flush(self.settings.session_end_flush_timeout_s)

    # -- lifecycle ------------------------------------------------------------------------------

    def flush(self, timeout: float = 10.0) -> int:
        """Wait up to `timeout` s for everything accepted to be delivered; return what is left.

        Includes the backlog: with Kafka reachable the drainer empties it
        while we wait. Never raises.
        """
        deadline = time.monotonic() + max(timeout, 0.0)
        pause = 0.0005
        try:
            while True:
                if self._backlog_active and len(self._backlog):
                    self._wake.set()
                # flush(0) sends what lingers right away and serves reports without blocking;
                # a blocking flush would sleep in poll() while our poller thread takes the
                # reports it waits for, costing up to 100 ms a call.
                left = int(self._producer.flush(0))
                backlog = len(self._backlog)
                if left == 0 and backlog == 0:
                    # A record can be between the two (taken by the drainer, or going back
                    # to the backlog from a delivery report): the ledger counts it.
                    outstanding = self._ledger.outstanding()
                    if outstanding == 0 or time.monotonic() >= deadline:
                        return outstanding
                elif time.monotonic() >= deadline:
                    return left + backlog
                time.sleep(pause)
                pause = min(pause * 2, 0.01)
        except Exception:  # flush is called from runtime callbacks: never raise into them
            log.exception("rlmesh-stream: flush failed")
            return len(self._producer) + len(self._backlog)

    async def aflush(self, timeout: float = 10.0) -> int:
        """`flush` for asyncio code: waits in a worker thread, not on the event loop."""
        return await asyncio.to_thread(self.flush, timeout)

    def close(self, timeout: float | None = None) -> Stats:
        """Flush (bounded), stop the threads, and keep what is undelivered in the spool.

        Without a spool, what is still undelivered when the budget runs out
        is counted as failed (reason `closed`).
        """
        if self._closed:
            return self.stats()
        self._closed = True
        lifecycle.unregister(self)
        budget = self.settings.exit_flush_timeout_s if timeout is None else timeout
        self.flush(budget)
        self._stop.set()
        self._wake.set()
        self._drainer.join(timeout=5.0)
        # Whatever librdkafka still holds: purge it so its delivery reports run now; with a
        # spool they are written back to disk for the next process, else counted as failed.
        self._producer.purge(in_queue=True, in_flight=True)
        self._producer.flush(1.0)
        self._poller.join(timeout=2.0)
        held = len(self._backlog)
        if held and not self._spooling:
            self._ledger.fail("closed", held)
            self._ledger.log_failure("closed", f"{held} held events discarded at close")
        stats = self.stats()
        self._backlog.close()
        if self.metrics_server is not None:
            self.metrics_server.close()
        if stats.spooled:
            log.warning("rlmesh-stream: closed with %d events in the spool %s; the next "
                        "producer using it will deliver them", stats.spooled,
                        self.settings.spool_dir)
        return stats

    async def aclose(self, timeout: float | None = None) -> Stats:
        return await asyncio.to_thread(self.close, timeout)

    def close_for_exit(self) -> None:
        self.close(self.settings.exit_flush_timeout_s)

    def __enter__(self) -> KafkaRuntimeHooks:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def stats(self) -> Stats:
        spooled = 0 if self._closed and not self._spooling else len(self._backlog)
        return self._ledger.snapshot(self.producer_id, spooled, len(self._producer))

    @property
    def schemas_ready(self) -> bool:
        """True once every enabled event type's schema id is known."""
        return self._ids_ready.is_set()

    # -- the hot path ---------------------------------------------------------------------------

    def _publish(self, slot: _Slot, event: Any) -> None:
        # One function on purpose: it runs up to three times per rollout step, and every call,
        # attribute or dict lookup saved here is saved per event (see benchmarks/).
        if not slot.enabled:
            with self._ledger.lock:
                self._ledger.disabled += 1
            return
        if self._closed:
            self._next_sequence()
            with self._ledger.lock:
                self._ledger.dropped += 1
            return
        capped = 0
        try:
            leaf_fields = slot.leaf_fields
            if leaf_fields is not None:
                size = 0
                for name in leaf_fields:
                    leaves = getattr(event, name)
                    if leaves:
                        size += sum(map(len, leaves))
                if size > slot.leaf_cap:
                    capped = size
            if not capped:
                encode = slot.encode
                if encode is not None and type(event) is slot.event_class:
                    payload = encode(event)
                else:
                    payload = self._encode(event)  # the encoder's own dispatch and type check
        except Exception as exc:
            self._reject(slot.et, event, exc)
            return
        if capped:
            self._publish_capped(slot, event, capped)
            return
        seq = self._next_sequence()
        headers: Headers = [*slot.base_headers, (_SEQUENCE, b"%d" % seq)]
        key = event.session_id.encode("utf-8")
        prefix = slot.prefix
        if prefix is None:
            self._hold(Record(slot.et, key, payload, False, headers, seq))
        elif self._backlog_active:
            self._hold(Record(slot.et, key, prefix + payload, True, headers, seq))
        else:
            value = prefix + payload
            try:
                # Positional (partition -1 = the partitioner's choice, timestamp 0 = now): the
                # client parses keywords noticeably slower. Delivery reports carry no headers:
                # the callback keeps them for a failure's account.
                self._produce_now(slot.topic, value, key, -1,
                                  functools.partial(self._report, headers), None, 0, headers)
                if self._shedding:
                    self._shedding = False
                return
            except BufferError:
                pass
            except KafkaException as exc:
                self._refused(Record(slot.et, key, value, True, headers, seq), exc)
                return
            self._produce_full(slot, key, value, headers, seq)

    def _publish_capped(self, slot: _Slot, event: Any, size: int) -> None:
        """An oversized payload goes without its leaves, flagged, never cut or split."""
        try:
            event = dataclasses.replace(event, **dict.fromkeys(slot.leaf_fields or ()))
            payload = self._encode(event)
        except Exception as exc:
            self._reject(slot.et, event, exc)
            return
        seq = self._next_sequence()
        headers: Headers = [*slot.base_headers, (_SEQUENCE, b"%d" % seq),
                            (h.LEAVES_OMITTED_BYTES, b"%d" % size)]
        with self._ledger.lock:
            self._ledger.leaves_omitted += 1
        key = event.session_id.encode("utf-8")
        prefix = slot.prefix
        if prefix is None:
            self._hold(Record(slot.et, key, payload, False, headers, seq))
        elif self._backlog_active:
            self._hold(Record(slot.et, key, prefix + payload, True, headers, seq))
        else:
            self._produce(slot.et, key, prefix + payload, headers, seq)

    def _produce(self, et: EventType, key: bytes, value: bytes, headers: Headers,
                 seq: int) -> None:
        slot = self._slots[_INDEX[et]]
        try:
            self._produce_now(slot.topic, value, key, -1,
                              functools.partial(self._report, headers), None, 0, headers)
            self._shedding = False
            return
        except BufferError:
            pass
        except KafkaException as exc:
            self._refused(Record(et, key, value, True, headers, seq), exc)
            return
        self._produce_full(slot, key, value, headers, seq)

    def _produce_full(self, slot: _Slot, key: bytes, value: bytes, headers: Headers,
                      seq: int) -> None:
        """librdkafka's queue is full: wait (bounded) for room, unless we are already shedding."""
        et = slot.et
        report = functools.partial(self._report, headers)
        if not self._shedding or self._spooling:
            deadline = time.monotonic() + self._max_block_s
            while time.monotonic() < deadline:
                time.sleep(_FULL_RETRY_SLEEP_S)
                try:
                    self._produce_now(slot.topic, value, key, -1, report, None, 0, headers)
                    self._shedding = False
                    return
                except BufferError:
                    continue
                except KafkaException as exc:
                    self._refused(Record(et, key, value, True, headers, seq), exc)
                    return
        if self._spooling:
            self._hold(Record(et, key, value, True, headers, seq))
            return
        self._shedding = True
        with self._ledger.lock:
            self._ledger.dropped += 1

    def _hold(self, record: Record) -> None:
        held = self._put_backlog(record)
        if held is None:
            return
        if held:
            with self._ledger.lock:
                self._ledger.spooled_total += 1
            self._wake.set()
            return
        with self._ledger.lock:
            self._ledger.dropped += 1

    def _put_backlog(self, record: Record, kafka_error: str | None = None) -> bool | None:
        """True when held, False when the backlog is full, None when the spool failed.

        A spool that cannot be written (disk full, directory removed) must not
        raise into the runtime: the event is counted failed with the OS error,
        and, when it was going back to the spool after a Kafka error, that
        error too (`kafka_error`), in the same log line.
        """
        try:
            with self._hold_lock:
                ok = self._backlog.put(record)
                if ok:
                    self._backlog_active = True
                return ok
        except OSError as exc:
            detail = str(exc) if kafka_error is None else (
                f"Kafka did not take it ({kafka_error}) and writing it back to the spool "
                f"failed: {exc}")
            self._fail(record.event_type, record.key, record.sequence,
                       f"spool:{type(exc).__name__}", detail)
            return None

    def _backlog_full(self) -> str:
        """Why a record could not go back to the backlog, for a failure's log line."""
        if self._spooling:
            return (f"the spool {self.settings.spool_dir} is full (spool_max_bytes="
                    f"{self.settings.spool_max_bytes})")
        return f"the in-memory backlog is full (held_max_events={self.settings.held_max_events})"

    def _refused(self, record: Record, exc: KafkaException) -> None:
        """librdkafka refused a record at produce(): retry a topic not ready yet, else fail."""
        err = exc.args[0] if exc.args else None
        if isinstance(err, KafkaError) and err.code() in TOPIC_NOT_READY_ERRORS:
            self._topic_not_ready(record, self._topics[record.event_type], err)
            return
        self._fail(record.event_type, record.key, record.sequence, _reason(exc), str(exc))

    def _topic_not_ready(self, record: Record, topic: str, err: KafkaError) -> None:
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
            held = self._put_backlog(record, kafka_error=f"{name}: {err.str()}")
            if held is None:
                return  # counted failed, with both errors
            if held:
                with self._ledger.lock:
                    self._ledger.spooled_total += 1
                self._kafka_ok = False
                self._topic_retry_at = now + _TOPIC_RETRY_S
                self._wake.set()
                return
            detail = (f"topic {topic!r} is not ready ({err.str()}) and the record could not "
                      f"be held for a retry: {self._backlog_full()}")
        else:
            detail = (f"topic {topic!r} still unavailable {waited:.0f} s after Kafka first "
                      f"answered {name} for it ({err.str()}): it does not exist and is not "
                      f"being auto-created, or has no leader; create it "
                      f"(`rlmesh-stream topics create`) or check the brokers")
        self._fail(record.event_type, record.key, record.sequence, name, detail)

    def _reject(self, et: EventType, event: Any, exc: Exception) -> None:
        """An event the contract cannot carry: accepted, then failed with its reason."""
        seq = self._ledger.next_sequence()
        session = getattr(event, "session_id", "?")
        self._fail(et, str(session).encode("utf-8", "replace"), seq,
                   f"contract:{type(exc).__name__}", str(exc))

    def _fail(self, et: EventType, key: bytes, seq: int, reason: str, detail: str) -> None:
        self._ledger.fail(reason)
        self._ledger.log_failure(reason, f"{et.value} seq={seq}: {detail}")
        if self._on_error is not None:
            try:
                self._on_error(DeliveryFailure(et.value, key.decode("utf-8", "replace"), seq,
                                               reason))
            except Exception:
                log.exception("rlmesh-stream: the error callback raised")

    # -- delivery reports (poller thread, or whoever calls flush) -------------------------------

    def _on_delivery(self, headers: Headers, err: KafkaError | None, msg: Message) -> None:
        if err is None:
            self._count_delivered(len(msg))
            self._kafka_ok = True
            if self._topic_trouble:
                self._topic_trouble.pop(msg.topic() or "", None)
            if self._kafka_unreachable_logged:
                self._kafka_unreachable_logged = False
                log.warning("rlmesh-stream: Kafka answers again; delivering held events")
            return
        self._delivery_failed(headers, err, msg)

    def _delivery_failed(self, headers: Headers, err: KafkaError, msg: Message) -> None:
        et = EventType((header_value(headers, h.EVENT_TYPE) or b"").decode())
        seq = int(header_value(headers, h.SEQUENCE) or b"-1")
        key = msg.key() or b""
        code = err.code()
        if code in TOPIC_NOT_READY_ERRORS:
            record = Record(et, key, msg.value() or b"", True, headers, seq)
            self._topic_not_ready(record, msg.topic() or self._topics[et], err)
            return
        if code not in PERMANENT_ERRORS:
            self._kafka_ok = False
        detail = access.kafka_access_message(self.settings.stream, err, operation="write to",
                                             topic=msg.topic()) or err.str()
        if self._spooling and code not in PERMANENT_ERRORS:
            record = Record(et, key, msg.value() or b"", True, headers, seq)
            ok = self._put_backlog(record, kafka_error=f"{err.name()}: {detail}")
            if ok is None:
                return  # counted failed by _put_backlog, with both errors
            if ok:
                with self._ledger.lock:
                    self._ledger.spooled_total += 1
                self._wake.set()
                return
            detail = f"{detail}; it could not go back to the spool: {self._backlog_full()}"
        self._fail(et, key, seq, err.name(), detail)

    def _on_backlog_delivery(self, tracker: _BatchTracker, headers: Headers,
                             err: KafkaError | None, msg: Message) -> None:
        try:
            self._on_delivery(headers, err, msg)
        finally:
            tracker.done()

    def _on_kafka_error(self, err: KafkaError) -> None:
        code = err.code()
        denied = access.kafka_access_message(self.settings.stream, err, operation="write to")
        if denied is not None:  # name the principal, not just "authentication failed"
            _ACCESS_LOG.error(log, denied)
            return
        if code in (KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT,
                    KafkaError._RESOLVE) and not self._kafka_unreachable_logged:
            self._kafka_ok = False
            self._kafka_unreachable_logged = True
            log.warning(
                "rlmesh-stream: Kafka at %s is unreachable (%s); events are held (%s) and "
                "delivered when it answers", self.settings.stream.bootstrap, err.str(),
                self._held_where(self.settings.queue_max_messages))
        elif err.fatal():
            log.error("rlmesh-stream: fatal producer error: %s", err.str())
        elif code not in (KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT,
                          KafkaError._RESOLVE):
            log.debug("rlmesh-stream: producer error: %s", err.str())

    # -- background threads ---------------------------------------------------------------------

    def _poll_loop(self) -> None:
        while not (self._stop.is_set() and not self._drainer.is_alive()):
            try:
                self._producer.poll(_POLL_INTERVAL_S)
            except Exception:
                log.exception("rlmesh-stream: delivery report handling failed")

    def _drain_loop(self) -> None:
        attempt = 0
        while not self._stop.is_set():
            if not self._ids_ready.is_set():
                if self._resolve_schema_ids():
                    self._ids_ready.set()
                    attempt = 0
                else:
                    # Drain what is already framed even while the registry is away.
                    delay = _REGISTRY_BACKOFF_S[min(attempt, len(_REGISTRY_BACKOFF_S) - 1)]
                    attempt += 1
                    self._stop.wait(delay)
                    continue
            if not self._backlog_active:
                self._wake.wait(0.2)
                self._wake.clear()
                continue
            if self._topic_retry_at:
                wait = self._topic_retry_at - time.monotonic()
                if wait > 0:
                    self._stop.wait(min(wait, 0.2))
                    continue
                self._topic_retry_at = 0.0
                self._refresh_topics()
            if not self._kafka_ok and not self._probe_kafka():
                self._stop.wait(1.0)
                continue
            batch = self._backlog.take()
            if batch is None:
                with self._hold_lock:
                    if len(self._backlog) == 0:
                        self._backlog_active = False
                continue
            self._drain_batch(batch)

    def _drain_batch(self, batch: Batch) -> None:
        tracker = _BatchTracker(len(batch.records), batch.release)
        producer = self._producer
        for record in batch.records:
            value = record.payload
            if not record.framed:
                value = self._prefixes[record.event_type] + value
            topic = self._topics[record.event_type]
            while True:
                try:
                    producer.produce(
                        topic, value, record.key, headers=record.headers,
                        on_delivery=functools.partial(self._on_backlog_delivery, tracker,
                                                      record.headers))
                    break
                except BufferError:
                    if self._stop.is_set():
                        # Closing: the spool file stays (replayed by the next process).
                        return
                    time.sleep(0.005)
                except KafkaException as exc:
                    self._refused(record if record.framed else Record(
                        record.event_type, record.key, value, True, record.headers,
                        record.sequence), exc)
                    tracker.done()
                    break
        tracker.arm()

    def _refresh_topics(self) -> None:
        """Ask for the metadata of the topics that were not ready, so librdkafka sees them again.

        librdkafka remembers a topic as nonexistent and fails its records at once
        until its next periodic refresh (minutes); asking for one topic by name
        refreshes it now (and lets a broker that auto-creates topics create it).
        """
        for topic in list(self._topic_trouble):
            try:
                self._producer.list_topics(topic=topic, timeout=1.0)
            except Exception:
                log.debug("rlmesh-stream: metadata of %s not available yet", topic,
                          exc_info=True)

    def _probe_kafka(self) -> bool:
        """Does a broker answer a metadata request? Then the held events can go."""
        try:
            metadata = self._producer.list_topics(timeout=1.0)
        except Exception:
            return False
        self._kafka_ok = bool(metadata.brokers)
        return self._kafka_ok

    def _resolve_schema_ids(self) -> bool:
        current: EventType | None = None
        try:
            if self._registrar is None:
                self._registrar = make_registrar(self.settings.stream, self.settings.format)
            for et in EventType:
                if et not in self._prefixes and et not in self._disabled:
                    current = et
                    schema_id = self._registrar.schema_id(et)
                    self._prefixes[et] = frame_prefix(schema_id, self.settings.format)
                    self._slots[_INDEX[et]].prefix = self._prefixes[et]
        except Exception as exc:
            refused = access.registry_refusal(exc)
            if refused is not None:
                if not self._registry_refused_logged:
                    self._registry_refused_logged = True
                    log.error("rlmesh-stream: %s", self._registry_refused_message(
                        refused, current))
                return False
            if not self._registry_unreachable_logged:
                self._registry_unreachable_logged = True
                log.warning(
                    "rlmesh-stream: schema registry at %s is unreachable (%s); events are "
                    "held (%s) and published when it answers", self.settings.stream.registry_url,
                    exc, self._held_where(self.settings.held_max_events))
            return False
        if self._registry_unreachable_logged or self._registry_refused_logged:
            log.warning("rlmesh-stream: schema registry answers again; publishing held events")
            self._registry_unreachable_logged = False
            self._registry_refused_logged = False
        return True

    def _registry_refused_message(self, refused: Any, et: EventType | None) -> str:
        """The registry answered 401/403: who was refused what, and what to do (no password)."""
        subject_of = getattr(self._registrar, "subject", None)  # a SchemaRegistrar's
        if et is None:
            request = "the request"
        elif callable(subject_of):
            request = f"the request to register the {et.value} schema (subject {subject_of(et)})"
        else:
            request = f"the request to register the {et.value} schema"
        return (f"{access.registry_access_message(self.settings.stream, refused, request)}; "
                f"events are held ({self._held_where(self.settings.held_max_events)}) and "
                f"published once it accepts them")

    def _held_where(self, memory_bound: int) -> str:
        """Where events wait while Kafka or the registry cannot take them, for a log line."""
        if self._spooling:
            return f"spool {self.settings.spool_dir}"
        return f"in memory, up to {memory_bound}"


class _Slot:
    """Everything the hot path needs about one event type, looked up once (no enum hashing)."""

    __slots__ = ("base_headers", "enabled", "encode", "et", "event_class", "leaf_cap",
                 "leaf_fields", "prefix", "topic")

    def __init__(self, et: EventType, topic: str, enabled: bool, base_headers: Headers,
                 leaf_fields: tuple[str, ...] | None, leaf_cap: int,
                 encode: Callable[[Any], bytes] | None) -> None:
        self.et = et
        self.event_class = et.event_class
        self.encode = encode  # for an event of exactly event_class; None: the encoder's dispatch
        self.topic = topic
        self.enabled = enabled
        # A tuple: unpacked into each record's fresh list, never shared or mutated.
        self.base_headers: tuple[Any, ...] = tuple(base_headers)
        self.leaf_fields = leaf_fields
        self.leaf_cap = leaf_cap
        self.prefix: bytes | None = None  # the wire-format prefix, once the schema id is known


class _LibrdkafkaLog:
    """librdkafka's log lines, at DEBUG: an outage would otherwise print one per retry.

    The hook itself says once, at WARNING, when Kafka or the registry is unreachable.
    """

    _log = logging.getLogger("rlmesh_stream.librdkafka")

    def log(self, level: int, fmt: str, *args: Any) -> None:
        self._log.debug(fmt, *args)


class _BatchTracker:
    """Releases a backlog batch once every record in it has an outcome."""

    __slots__ = ("_lock", "_on_done", "_outstanding")

    def __init__(self, count: int, on_done: Callable[[], None]) -> None:
        self._lock = threading.Lock()
        self._outstanding = count + 1  # +1 until every record has been produced (arm)
        self._on_done = on_done

    def done(self) -> None:
        with self._lock:
            self._outstanding -= 1
            finished = self._outstanding == 0
        if finished:
            self._on_done()

    def arm(self) -> None:
        self.done()


def _reason(exc: KafkaException) -> str:
    err = exc.args[0] if exc.args else None
    return err.name() if isinstance(err, KafkaError) else type(exc).__name__

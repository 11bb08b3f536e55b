"""`KafkaRuntimeHooks`: the rlmesh runtime's observer, publishing every event to Kafka.

A facade: the runtime's callbacks, construction, and flush / close / stats.
The work is done by four parts, each in its own module:
* `publisher.Publisher`: the hot path (encode, sequence, produce or hold);
* `outcomes.Outcomes`: the backlog (spool or memory) and every failure's account;
* `drainer.Drainer`: delivery reports, Kafka's reachability, the backlog
  drainer thread and topic-not-ready retries;
* `schema_ids.SchemaIdResolver`: schema ids from the registry, with back-off.

The hook runs inline in every rollout, so a callback only encodes, stamps
headers and enqueues into librdkafka; network I/O happens on librdkafka's
threads and delivery reports are served by a poller thread of ours. A
callback never raises into the runtime and never waits longer than
`max_block_ms` (plus the bounded flushes at session end).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from types import TracebackType
from typing import Any

from rlmesh_stream.producer import lifecycle, metrics
from rlmesh_stream.producer.backlog import Backlog, MemoryBacklog
from rlmesh_stream.producer.config import ProducerSettings
from rlmesh_stream.producer.delivery import Ledger, Stats, new_producer_id
from rlmesh_stream.producer.drainer import Drainer
from rlmesh_stream.producer.encoding import PayloadEncoder, SchemaIds, direct_encoders, make_encoder
from rlmesh_stream.producer.outcomes import Outcomes
from rlmesh_stream.producer.publisher import Publisher, Slot
from rlmesh_stream.producer.schema_ids import SchemaIdResolver
from rlmesh_stream.producer.spool import Spool
from rlmesh_stream.schemas.connection.config import StreamConfig
from rlmesh_stream.schemas.contract import events as ev
from rlmesh_stream.schemas.contract.topics import EVENT_TYPES, EventType

log = logging.getLogger(__name__)

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
        self._ledger = ledger = Ledger()
        self._encoder = encoder if encoder is not None else make_encoder(settings.format)
        direct = direct_encoders(settings.format) if encoder is None else {}
        topics = {et: et.topic(settings.stream.topic_prefix) for et in EventType}
        leaf_cap = settings.leaves_max_bytes
        self._slots = [
            Slot(et, topics[et], et not in settings.disabled_events,
                 _LEAF_EVENTS.get(et) if leaf_cap is not None else None, leaf_cap or 0,
                 direct.get(et))
            for et in EVENT_TYPES
        ]
        backlog: Backlog
        if settings.overflow == "spool":
            assert settings.spool_dir is not None
            spool = Spool(settings.spool_dir, self.producer_id, max_bytes=settings.spool_max_bytes)
            # Records a damaged segment lost: left by an earlier process, and failed.
            ledger.recovered = spool.recovered + sum(spool.lost.values())
            for reason, lost in spool.lost.items():
                ledger.fail(reason, lost)
            ledger.spool_set_aside = spool.set_aside
            backlog = spool
        else:
            backlog = MemoryBacklog(settings.held_max_events)
        self._spooling = settings.overflow == "spool"
        self._outcomes = outcomes = Outcomes(settings, ledger, backlog)
        self._backlog = backlog
        self._resolver = SchemaIdResolver(settings, self._slots, registrar, outcomes.where)
        self._drainer = Drainer(settings, ledger, outcomes, self._resolver, topics,
                                self.producer_id[:8])
        self._producer = self._drainer.producer
        self._publisher = Publisher(settings, self._producer, ledger, self._encoder, outcomes,
                                    self._drainer, self.producer_id)
        self._publish = self._publisher.publish  # bound once: every callback calls it
        self._closed = False
        self._drainer.start()
        if startup_wait_s > 0:
            self._resolver.ready.wait(startup_wait_s)
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

    def session_ended(self, event: ev.SessionEndedEvent, *, flush: bool = True) -> None:
        """Publish the session's end, then wait (bounded) for its delivery.

        `flush=False` skips the wait, for a caller that flushes off the rollout's
        thread (the rlmesh bridge): the event is accepted either way.
        """
        self._publish(self._slots[_SESSION_ENDED], event)
        if flush:
            self.flush(self.settings.session_end_flush_timeout_s)

    def on_telemetry(self, event: ev.TelemetrySnapshotEvent) -> None:
        self._publish(self._slots[_TELEMETRY_SNAPSHOT], event)

    def session_failed(self, event: ev.SessionFailedEvent, *, flush: bool = True) -> None:
        """As `session_ended`, for a session that failed."""
        self._publish(self._slots[_SESSION_FAILED], event)
        if flush:
            self.flush(self.settings.session_end_flush_timeout_s)

    def log(self, event: ev.LogEvent) -> None:
        self._publish(self._slots[_LOG], event)

    def relay_advisory(self, event: ev.RelayAdvisoryEvent) -> None:
        self._publish(self._slots[_RELAY_ADVISORY], event)

    def publish(self, event: ev.RuntimeEvent) -> None:
        """Any runtime event, dispatched by its type (for callers that hold a union)."""
        try:
            et = EventType.of(event)
        except TypeError as exc:  # not a runtime event: counted failed, like a callback's
            self._outcomes.reject(type(event).__name__, event, exc)
            return
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
                if self._outcomes.active and len(self._backlog):
                    self._outcomes.wake.set()
                # flush(0) sends what lingers right away and serves reports without blocking;
                # a blocking flush would sleep in poll() while our poller thread takes the
                # reports it waits for, costing up to 100 ms a call.
                left = int(self._producer.flush(0))
                backlog = len(self._backlog)
                if left == 0 and backlog == 0:
                    # Drained spool segments go now, not at the drainer's next look.
                    self._drainer.release_settled()
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
        self._publisher.closed = True
        lifecycle.unregister(self)
        budget = max(self.settings.exit_flush_timeout_s if timeout is None else timeout, 0.0)
        deadline = time.monotonic() + budget
        # Most of the budget to deliver, the rest (at most 1 s) to stop and keep what is left:
        # close(t) returns within about t s even with a hung registry or no broker.
        self.flush(budget - min(1.0, budget / 4))

        def left(cap: float) -> float:
            return min(max(deadline - time.monotonic(), 0.05), cap)

        self._drainer.stop_draining(timeout=left(5.0))  # may be stuck in a registry request
        # Whatever librdkafka still holds: purge it so its delivery reports run now; with a
        # spool they are written back to disk for the next process, else counted as failed.
        self._producer.purge(in_queue=True, in_flight=True)
        self._producer.flush(left(1.0))
        self._drainer.release_settled()  # a drained spool segment whose last reports came now
        self._drainer.stop_polling(timeout=left(2.0))
        self._outcomes.say_drops()
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
        return self._resolver.ready.is_set()

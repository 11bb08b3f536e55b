"""Prometheus metrics of the hook: its `stats()`, read at scrape time.

A custom collector rather than counters bumped on the hot path: every scrape
asks the hook for one consistent `Stats` snapshot, so the exported numbers equal
`stats()` by construction and the rollout pays nothing between scrapes.

    registry = CollectorRegistry()
    register(hooks, registry)          # expose it yourself, or
    KafkaRuntimeHooks(..., metrics_port=9464)   # the hook serves /metrics itself

The served endpoint binds to RLMESH_STREAM_METRICS_ADDR (default 0.0.0.0, as
Prometheus exporters do).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from rlmesh_stream.producer.delivery import Stats

log = logging.getLogger(__name__)

ADDR_ENV = "RLMESH_STREAM_METRICS_ADDR"
PREFIX = "rlmesh_stream_producer"

# (Stats field, metric name without _total, help): counters, each only ever grows.
_COUNTERS = (
    ("accepted", "events_accepted", "Events this process took in."),
    ("recovered", "events_recovered",
     "Events an earlier process left in the spool, picked up by this one."),
    ("delivered", "events_delivered", "Events Kafka acknowledged."),
    ("dropped", "events_dropped", "Events refused by the overflow policy (queue full)."),
    ("spooled_total", "events_spooled", "Events ever written to the spool or held in memory."),
    ("disabled", "events_disabled", "Events skipped by a per-event-type switch."),
    ("leaves_omitted", "events_leaves_omitted",
     "Events published without their leaves (size cap)."),
    ("delivered_bytes", "delivered_bytes", "Value bytes Kafka acknowledged."),
    ("spool_set_aside", "spool_segments_set_aside",
     "Damaged spool segments found at start-up and set aside (never deleted)."),
)
# Gauges: how much is pending now.
_GAUGES = (
    ("in_flight", "events_in_flight", "Events handed to librdkafka with no outcome yet."),
    ("spooled", "spool_events", "Events waiting in the spool or memory backlog now."),
    ("queue_depth", "queue_messages", "Messages in librdkafka's queue (incl. in flight)."),
)


class HasStats(Protocol):
    producer_id: str

    def stats(self) -> Stats: ...


class HookCollector(Collector):
    """Collects one hook's `stats()` as Prometheus counters and gauges."""

    def __init__(self, hooks: HasStats, topic_prefix: str = "") -> None:
        self.hooks = hooks
        self.topic_prefix = topic_prefix

    def collect(self) -> Iterator[Metric]:
        stats = self.hooks.stats()
        labels = ["producer_id", "topic_prefix"]
        values = [stats.producer_id, self.topic_prefix]
        for field, name, help_text in _COUNTERS:
            counter = CounterMetricFamily(f"{PREFIX}_{name}", help_text, labels=labels)
            counter.add_metric(values, getattr(stats, field))
            yield counter
        failed = CounterMetricFamily(f"{PREFIX}_events_failed",
                                     "Events never delivered, by reason.",
                                     labels=[*labels, "reason"])
        for reason, count in sorted(stats.failed.items()):
            failed.add_metric([*values, reason], count)
        yield failed
        for field, name, help_text in _GAUGES:
            gauge = GaugeMetricFamily(f"{PREFIX}_{name}", help_text, labels=labels)
            gauge.add_metric(values, getattr(stats, field))
            yield gauge


def register(hooks: HasStats, registry: CollectorRegistry, topic_prefix: str = ""
             ) -> HookCollector:
    """Register the hook's metrics in `registry` (yours, or prometheus_client's REGISTRY)."""
    collector = HookCollector(hooks, topic_prefix)
    registry.register(collector)
    return collector


class MetricsServer:
    """The hook's own /metrics endpoint (its own registry, so two hooks never clash)."""

    def __init__(self, hooks: HasStats, port: int, topic_prefix: str = "",
                 addr: str | None = None) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        register(hooks, self.registry, topic_prefix)
        self._server: Any
        self._server, self._thread = start_http_server(
            port, addr=addr or os.environ.get(ADDR_ENV, "0.0.0.0"), registry=self.registry)

    @property
    def port(self) -> int:
        return int(self._server.server_port)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def serve(hooks: Any) -> MetricsServer | None:
    """Start the hook's endpoint when its settings name `metrics_port`; else None.

    A port that cannot be bound is logged and the hook runs on without its endpoint:
    metrics never break a rollout.
    """
    port = hooks.settings.metrics_port
    if port is None:
        return None
    try:
        return MetricsServer(hooks, port, hooks.settings.stream.topic_prefix)
    except OSError as exc:
        log.error("rlmesh-stream: cannot serve the hook's metrics on port %d (%s); "
                  "running without them", port, exc.strerror or exc)
        return None

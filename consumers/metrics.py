"""Prometheus metrics of a consumer process (`consume --metrics-port`).

The runtime reports through four small calls: `read` (records polled, per
topic), `checkpoint` (records applied and dead-lettered per topic, rows written
per table, how long the checkpoint took), and `tick` (lag per partition, at most
once a second, and at the end of a run). Each process has its own registry and
endpoint, so several consumers on one machine never clash.
"""

from __future__ import annotations

import os
import time
from collections import Counter as Tally
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

ADDR_ENV = "RLMESH_STREAM_METRICS_ADDR"
ALL_INTERFACES = "0.0.0.0"  # the default bind address, as Prometheus exporters have it
PREFIX = "rlmesh_stream_consumer"
TICK_S = 1.0


class ConsumerMetrics:
    """One consumer process's counters, gauges and histogram, in a registry of its own."""

    def __init__(self, group_id: str) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.group_id = group_id
        r = self.registry
        self.records_read = Counter(f"{PREFIX}_records_read", "Records polled from Kafka.",
                                    ["group", "topic"], registry=r)
        self.records_applied = Counter(
            f"{PREFIX}_records_applied", "Records decoded and committed to the tables.",
            ["group", "topic"], registry=r)
        self.dead_letters = Counter(f"{PREFIX}_dead_letters",
                                    "Records sent to the dead-letter topic and table.",
                                    ["group", "topic"], registry=r)
        self.rows_written = Counter(f"{PREFIX}_rows_written",
                                    "Rows upserted into each table at checkpoints.",
                                    ["group", "table"], registry=r)
        self.checkpoint_seconds = Histogram(
            f"{PREFIX}_checkpoint_duration_seconds",
            "Time to build and commit one checkpoint (one sink transaction).",
            ["group"], registry=r)
        self.lag = Gauge(f"{PREFIX}_lag_records",
                         "Records behind the partition's end offset.",
                         ["group", "topic", "partition"], registry=r)
        self._ticked = 0.0
        self._lagged: set[tuple[str, int]] = set()  # partitions with a lag series
        self._server: Any = None
        self.address: tuple[str, int] | None = None  # where `serve` bound, once it has

    def serve(self, port: int, addr: str | None = None) -> int:
        """Serve /metrics on `port` (0: any free port) at `addr` (default: $ADDR_ENV, else
        every interface); returns the port, and `address` is then (address, port)."""
        addr = addr or os.environ.get(ADDR_ENV, ALL_INTERFACES)
        self._server, _ = start_http_server(port, addr=addr, registry=self.registry)
        self.address = (addr, int(self._server.server_port))
        return self.address[1]

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    # -- the runtime's calls ----------------------------------------------------------

    def read(self, messages: Iterable[Any]) -> None:
        for topic, count in Tally(m.topic() for m in messages if m.error() is None).items():
            self.records_read.labels(self.group_id, topic).inc(count)

    def checkpoint(self, buffer: Iterable[Any], rows: Mapping[Any, list[Any]],
                   seconds: float) -> None:
        """A committed checkpoint: its records (Record or DeadLetter), rows per table."""
        from rlmesh_stream.consumers.deadletter import DeadLetter

        applied: Tally[str] = Tally()
        dead: Tally[str] = Tally()
        for item in buffer:
            (dead if isinstance(item, DeadLetter) else applied)[item.topic] += 1
        for topic, count in applied.items():
            self.records_applied.labels(self.group_id, topic).inc(count)
        for topic, count in dead.items():
            self.dead_letters.labels(self.group_id, topic).inc(count)
        for table, table_rows in rows.items():
            name = getattr(table, "name", str(table))
            self.rows_written.labels(self.group_id, name).inc(len(table_rows))
        self.checkpoint_seconds.labels(self.group_id).observe(seconds)

    def tick(self, lag_by_partition: Callable[[], Mapping[tuple[str, int], int] | None],
             force: bool = False) -> None:
        """Refresh the lag gauges, at most once a second unless forced."""
        now = time.monotonic()
        if not force and now - self._ticked < TICK_S:
            return
        self._ticked = now
        lags = lag_by_partition()
        if lags is None:
            return
        for topic, partition in self._lagged - lags.keys():  # revoked: no longer ours
            self.lag.remove(self.group_id, topic, str(partition))
        self._lagged = set(lags)
        for (topic, partition), lag in lags.items():
            self.lag.labels(self.group_id, topic, str(partition)).set(lag)

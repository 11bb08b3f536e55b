"""Telemetry snapshot types, mirroring rlmesh-runtime's `crate::telemetry` (runtime-events.md §5).

A `Snapshot` is a pure metrics payload; identity rides on the enclosing
`TelemetrySnapshotEvent`. `Horizon.WINDOW` rows cover one telemetry window,
`Horizon.SESSION` rows the whole session (cumulative, the durable tier).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class Horizon(enum.Enum):
    """Which tier a snapshot belongs to."""

    WINDOW = "Window"
    SESSION = "Session"


class Kind(enum.Enum):
    """Fixes a metric's unit: milliseconds, bytes or a plain count."""

    DURATION = "Duration"
    BYTES = "Bytes"
    COUNT = "Count"


@dataclass(slots=True, kw_only=True)
class Source:
    """Who produced a sample: the operation (`env.step`) and component (`env`)."""

    op: str
    component: str


@dataclass(slots=True, kw_only=True)
class Metric:
    """What was measured (`rpc.total`) and in which unit."""

    name: str
    kind: Kind


@dataclass(slots=True, kw_only=True)
class Row:
    """One metric of one source over the horizon; stats over a bounded reservoir."""

    source: Source
    metric: Metric
    count: int  # u64
    avg: float
    p50: float
    p95: float
    p99: float


@dataclass(slots=True, kw_only=True)
class Snapshot:
    horizon: Horizon
    rows: list[Row] = field(default_factory=list)

"""Telemetry: window rollups per tumbling window, and the exact per-session rows.

Window-horizon snapshots are folded into `telemetry_rollups` by the record
timestamp's tumbling window: counts summed, averages count-weighted (exact),
percentiles estimated (see `rlmesh_stream.consumers.tables.TELEMETRY_ROLLUPS`). Session-horizon
snapshots are cumulative and exact, so they are stored as they are.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Context, Decimal
from typing import TYPE_CHECKING, ClassVar, cast

from rlmesh_stream.consumers.builders.base import Builder, PartialRow
from rlmesh_stream.consumers.runtime.records import Record, enum_text, route_columns
from rlmesh_stream.consumers.table_model import Table
from rlmesh_stream.consumers.tables import TELEMETRY_ROLLUPS, TELEMETRY_SESSIONS
from rlmesh_stream.schemas.contract.telemetry import Horizon
from rlmesh_stream.schemas.contract.topics import EventType

if TYPE_CHECKING:  # the event classes load with the decoders, not at start-up
    from rlmesh_stream.schemas.contract import events as ev

DEFAULT_WINDOW = timedelta(minutes=1)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


_NANO = Decimal("1e-9")
# The `*_total` columns are DECIMAL(38, 9): 29 digits before the point. A product is computed
# with all 38 digits (Python's default context keeps 28 and raised InvalidOperation from 1e19
# on), and one of 1e26 or more is left out like a non-finite value: a thousand such rows
# still sum inside the column.
_EXACT = Context(prec=38)
_LARGEST = Decimal("1e26")


def weighted(count: int, value: float) -> Decimal | None:
    """count * value rounded to 1e-9, so sums of it are exact in any order; None when the
    value is not finite or the product too large for the column to sum."""
    if not math.isfinite(value):
        return None
    product = _EXACT.multiply(Decimal(count), Decimal(value))
    if abs(product) >= _LARGEST:
        return None
    return product.quantize(_NANO, context=_EXACT)


MIN_WINDOW_S = 0.001
"""The shortest tumbling window: a window must be a positive span the tables can hold."""


def window_start(ts: datetime, window: timedelta) -> datetime:
    """The start of the tumbling window holding `ts` (windows aligned to the epoch)."""
    return _EPOCH + ((ts - _EPOCH) // window) * window


class TelemetryBuilder(Builder):
    name = "telemetry"
    event_types: ClassVar[frozenset[EventType]] = frozenset({EventType.TELEMETRY_SNAPSHOT})
    tables: ClassVar[tuple[Table, ...]] = (TELEMETRY_ROLLUPS, TELEMETRY_SESSIONS)

    def __init__(self, window: timedelta = DEFAULT_WINDOW) -> None:
        if window.total_seconds() < MIN_WINDOW_S:
            raise ValueError(f"the telemetry window must be at least {MIN_WINDOW_S} s, "
                             f"got {window.total_seconds()} s")
        self.window = window

    def rows(self, record: Record) -> Iterator[PartialRow]:
        if record.event_type is not EventType.TELEMETRY_SNAPSHOT or record.event is None:
            return
        e = cast("ev.TelemetrySnapshotEvent", record.event)
        route = route_columns(e.route)
        if e.snapshot.horizon is Horizon.SESSION:
            for r in e.snapshot.rows:
                yield TELEMETRY_SESSIONS, {
                    "session_id": e.session_id, "op": r.source.op,
                    "component": r.source.component, "metric": r.metric.name,
                    "kind": enum_text(r.metric.kind), "count": r.count, "avg": r.avg,
                    "p50": r.p50, "p95": r.p95, "p99": r.p99, **route,
                }
            return
        start = window_start(record.timestamp, self.window)
        for r in e.snapshot.rows:
            yield TELEMETRY_ROLLUPS, {
                "window_start": start, "window_end": start + self.window, "env_id": e.route.env_id,
                "model_component_id": e.route.model_component_id, "lane": e.route.lane,
                "lane_key": -1 if e.route.lane is None else e.route.lane,
                "op": r.source.op, "component": r.source.component, "metric": r.metric.name,
                "kind": enum_text(r.metric.kind), "count": r.count, "row_count": 1,
                "avg_total": weighted(r.count, r.avg), "p50_total": weighted(r.count, r.p50),
                "p95_total": weighted(r.count, r.p95), "p99_total": weighted(r.count, r.p99),
                "max_p99": r.p99,
            }

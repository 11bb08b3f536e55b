"""The `telemetry_rollups` and `telemetry_sessions` views: one partial row per snapshot row.

As the telemetry builder (`builders/telemetry.py`): a Session-horizon snapshot's rows go
to `telemetry_sessions` as they are; any other snapshot's rows are folded into the
tumbling window (aligned to the epoch) holding the record timestamp, with each
percentile weighted by its row's count, `count * value` rounded to 1e-9 (`weighted`), so
the sums are exact in any order. The window is the builder's (one minute by default).
"""

from __future__ import annotations

from datetime import timedelta

from rlmesh_stream.consumers.builders.projection import Const
from rlmesh_stream.consumers.builders.telemetry import DEFAULT_WINDOW
from rlmesh_stream.consumers.flink.render import (
    RECORD_TIME,
    EnumText,
    FlinkView,
    Partial,
    Source,
    Sql,
    path_sql,
    table_view,
)
from rlmesh_stream.consumers.tables import TELEMETRY_ROLLUPS, TELEMETRY_SESSIONS
from rlmesh_stream.schemas.contract.telemetry import Horizon, Kind
from rlmesh_stream.schemas.contract.topics import EventType

ROWS = "snapshot.rows"
_SESSION = f"{path_sql('snapshot.horizon')} = '{Horizon.SESSION.name}'"
# the record timestamp as ms since the epoch, independent of the session time zone
_EPOCH_MS = (f"(CAST(TIMESTAMPDIFF(SECOND, TO_TIMESTAMP_LTZ(0, 3), {RECORD_TIME}) AS BIGINT)"
             f" * 1000 + EXTRACT(MILLISECOND FROM {RECORD_TIME}))")
_ROW: dict[str, Source] = {
    "op": "item.source.op", "component": "item.source.component",
    "metric": "item.metric.name", "kind": EnumText("item.metric.kind", Kind),
}
# exact below 1e10 (count and value): count * value to 18 decimals, rounded to 9
_FINITE = "1.7976931348623157E308"


def weighted_sql(count: str, value: str) -> Sql:
    """`builders.telemetry.weighted`: count * value rounded to 1e-9, NULL if not finite."""
    c, v = path_sql(count), path_sql(value)
    return Sql(f"CASE WHEN NOT (ABS({v}) <= {_FINITE}) THEN CAST(NULL AS DECIMAL(38, 9)) "
               f"WHEN ABS({v}) < 1E10 AND {c} < 10000000000 THEN CAST(ROUND(CAST({c} AS "
               f"DECIMAL(10, 0)) * CAST({v} AS DECIMAL(28, 18)), 9) AS DECIMAL(38, 9)) "
               f"ELSE CAST(CAST({c} AS DECIMAL(38, 9)) * CAST({v} AS DECIMAL(38, 9)) AS "
               "DECIMAL(38, 9)) END")


def window_ms(window: timedelta) -> int:
    """The window in ms: a positive whole number of them (the record timestamps' unit)."""
    ms, rest = divmod(window, timedelta(milliseconds=1))
    if rest or ms <= 0:
        raise ValueError("the telemetry window must be a positive whole number of "
                         f"milliseconds, got {window.total_seconds()} s")
    return ms


def rollup_partials(window: timedelta = DEFAULT_WINDOW) -> tuple[Partial, ...]:
    w = window_ms(window)
    start = f"({_EPOCH_MS} - MOD({_EPOCH_MS}, {w}))"
    return (Partial(EventType.TELEMETRY_SNAPSHOT, {
        "window_start": Sql(f"TO_TIMESTAMP_LTZ({start}, 3)"),
        "window_end": Sql(f"TO_TIMESTAMP_LTZ({start} + {w}, 3)"),
        "env_id": "route.env_id", "model_component_id": "route.model_component_id",
        "lane": "route.lane", "lane_key": Sql(f"COALESCE({path_sql('route.lane')}, -1)"),
        **_ROW, "count": "item.count", "row_count": Const(1),
        **{f"{p}_total": weighted_sql("item.count", f"item.{p}")
           for p in ("avg", "p50", "p95", "p99")},
        "max_p99": "item.p99",
    }, unnest=ROWS, where=f"NOT ({_SESSION})"),)


SESSION_PARTIALS = (
    Partial(EventType.TELEMETRY_SNAPSHOT, {
        "session_id": "session_id", **_ROW,
        **{c: f"item.{c}" for c in ("count", "avg", "p50", "p95", "p99")},
        **{c: f"route.{c}" for c in ("env_id", "env_component_id", "model_component_id",
                                     "lane")},
    }, unnest=ROWS, where=_SESSION),
)


def rollups_view(window: timedelta = DEFAULT_WINDOW) -> FlinkView:
    return table_view(TELEMETRY_ROLLUPS, rollup_partials(window), (
        "*_total: count * value is rounded to 1e-9 half up (the builder: half even), from "
        "the value to 18 decimals when count and value are below 1e10, else from the value "
        "to 9 decimals; equal but for a value whose product ends exactly on a half",
    ))


def sessions_view() -> FlinkView:
    return table_view(TELEMETRY_SESSIONS, SESSION_PARTIALS)

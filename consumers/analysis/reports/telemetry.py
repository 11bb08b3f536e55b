"""Telemetry per env, model and operation, from each session's exact `Session` snapshot.

Why `telemetry_sessions` and not the window rollups: the Session horizon is the
durable tier, delivered once per session on every exit path, so it covers each
session whole. Across sessions the mean is exact (a count-weighted mean of the
sessions' means); percentiles cannot be combined exactly, so p50/p95 are shown
as count-weighted estimates and p99 as the largest session p99, an upper bound
(a quantile of a mixture never exceeds its parts' largest).
"""

from __future__ import annotations

from collections.abc import Sequence

from rlmesh_stream.consumers.analysis.reports.model import Column, Report
from rlmesh_stream.consumers.analysis.reports.store import Store, require_table
from rlmesh_stream.consumers.tables import TELEMETRY_SESSIONS

_SQL = f"""
SELECT env_id, model_component_id, op, component, metric, kind,
       COUNT(DISTINCT session_id) AS sessions,
       SUM("count") AS samples,
       SUM("count" * avg) / NULLIF(SUM("count"), 0) AS mean,
       SUM("count" * p50) / NULLIF(SUM("count"), 0) AS p50_est,
       SUM("count" * p95) / NULLIF(SUM("count"), 0) AS p95_est,
       MAX(p99) AS p99_max
FROM {TELEMETRY_SESSIONS.name}
WHERE {{where}}
GROUP BY env_id, model_component_id, op, component, metric, kind
ORDER BY env_id, model_component_id, op, component, metric
"""

UNITS = {"Duration": "ms", "Bytes": "B", "Count": ""}

COLUMNS = [
    Column("env_id", "Env"),
    Column("model_component_id", "Model"),
    Column("op", "Op"),
    Column("component", "Component"),
    Column("metric", "Metric"),
    Column("unit", "Unit"),
    Column("sessions", "Sessions", "right", "int"),
    Column("samples", "Samples", "right", "int"),
    Column("mean", "Mean", "right", "float"),
    Column("p50_est", "p50 (est.)", "right", "float"),
    Column("p95_est", "p95 (est.)", "right", "float"),
    Column("p99_max", "p99 (max)", "right", "float"),
]


def telemetry_report(store: Store, *, ops: Sequence[str] = (),
                     metrics: Sequence[str] = ()) -> Report:
    """One row per (env, model, op, component, metric) over every session's snapshot.

    `ops` / `metrics` keep only those operations and metric names (empty: all).
    """
    require_table(store, TELEMETRY_SESSIONS)
    clauses, params = ["TRUE"], []
    for column, values in (("op", ops), ("metric", metrics)):
        if values:
            clauses.append(f"{column} IN ({', '.join('%s' for _ in values)})")
            params += list(values)
    where = " AND ".join(clauses)
    rows = store.query(_SQL.format(where=where), params).dicts()
    for row in rows:
        row["unit"] = UNITS.get(str(row["kind"]), str(row["kind"] or ""))
    return Report(
        name="telemetry",
        title="Telemetry per env, model and operation (session snapshots)",
        columns=COLUMNS,
        rows=rows,
        summary={"rows": len(rows),
                 "sessions": int(store.query(
                     f"SELECT COUNT(DISTINCT session_id) FROM {TELEMETRY_SESSIONS.name} "
                     f"WHERE {where}",
                     params).rows[0][0])},
        notes=["Mean is exact; p50/p95 are count-weighted estimates across sessions; "
               "p99 (max) is the largest session p99, an upper bound."],
        empty_message=_empty_message(store, ops, metrics),
    )


def _empty_message(store: Store, ops: Sequence[str], metrics: Sequence[str]) -> str:
    """Why there are no rows: no snapshots at all, or none of the asked ops or metrics."""
    if not ops and not metrics:
        return "No telemetry snapshots in the store yet."
    asked = [f"{name} {', '.join(values)}" for name, values in
             (("--op", ops), ("--metric", metrics)) if values]
    known = [f"{column}s: {', '.join(_known(store, column)) or 'none'}"
             for column, values in (("op", ops), ("metric", metrics)) if values]
    return f"No telemetry rows for {' and '.join(asked)}. Known {'; '.join(known)}."


def _known(store: Store, column: str, limit: int = 20) -> list[str]:
    rows = store.query(f"SELECT DISTINCT {column} FROM telemetry_sessions ORDER BY 1 "
                       f"LIMIT {limit}").rows
    return [str(r[0]) for r in rows]

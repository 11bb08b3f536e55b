"""The fleet advisory report: which env/model pairs had payloads converted, and how badly.

An advisory row in the store is one distinct (session, leg, severity, message)
with a count. Across a fleet the useful question is not "which session" but
"which env and model, on which leg, and how many sessions did it touch", with
`caution` (the model saw substituted or fabricated data) above everything else,
so that an eval pipeline can gate on it (`--fail-on`).
"""

from __future__ import annotations

from collections.abc import Sequence

from rlmesh_stream.consumers.analysis.reports.model import Column, Report
from rlmesh_stream.consumers.analysis.reports.store import Store, require_table
from rlmesh_stream.consumers.tables import ADVISORIES, SESSIONS

SEVERITY_RANK = {"caution": 0, "info": 1}
"""Lower is worse. Unknown severities (a newer runtime) sort after these."""

_GROUPS_SQL = """
WITH adv AS (
    SELECT lower(severity) AS severity, env_id, model_component_id, leg, message,
           session_id, "count" AS n, first_seen, last_seen
    FROM {advisories}
    WHERE {where}
),
per_message AS (
    SELECT severity, env_id, model_component_id, leg, message, SUM(n) AS n,
           ROW_NUMBER() OVER (
               PARTITION BY severity, env_id, model_component_id, leg
               ORDER BY SUM(n) DESC, message
           ) AS rank
    FROM adv
    GROUP BY severity, env_id, model_component_id, leg, message
),
groups AS (
    SELECT severity, env_id, model_component_id, leg,
           COUNT(DISTINCT session_id) AS sessions,
           SUM(n) AS occurrences,
           COUNT(DISTINCT message) AS messages,
           MIN(first_seen) AS first_seen,
           MAX(last_seen) AS last_seen
    FROM adv
    GROUP BY severity, env_id, model_component_id, leg
)
SELECT g.severity, g.env_id, g.model_component_id, g.leg, g.sessions, g.occurrences,
       g.messages, g.first_seen, g.last_seen, m.message AS sample_message
FROM groups g
JOIN per_message m
  ON m.rank = 1
 AND m.severity = g.severity
 AND m.leg IS NOT DISTINCT FROM g.leg
 AND m.env_id IS NOT DISTINCT FROM g.env_id
 AND m.model_component_id IS NOT DISTINCT FROM g.model_component_id
ORDER BY CASE g.severity WHEN 'caution' THEN 0 WHEN 'info' THEN 1 ELSE 2 END,
         g.sessions DESC, g.occurrences DESC, g.env_id, g.model_component_id, g.leg
"""

COLUMNS = [
    Column("severity", "Severity"),
    Column("env_id", "Env"),
    Column("model_component_id", "Model"),
    Column("leg", "Leg"),
    Column("sessions", "Sessions", "right", "int"),
    Column("occurrences", "Count", "right", "int"),
    Column("messages", "Messages", "right", "int"),
    Column("first_seen", "First seen", kind="time"),
    Column("last_seen", "Last seen", kind="time"),
    Column("sample_message", "Most frequent message"),
]


def _route_filter(envs: Sequence[str], models: Sequence[str]) -> tuple[str, list[str]]:
    """A WHERE clause (with parameters) keeping only the named envs and models."""
    clauses, params = ["TRUE"], []
    for column, values in (("env_id", envs), ("model_component_id", models)):
        if values:
            clauses.append(f"{column} IN ({', '.join('%s' for _ in values)})")
            params += list(values)
    return " AND ".join(clauses), params


def advisory_report(store: Store, *, envs: Sequence[str] = (),
                    models: Sequence[str] = ()) -> Report:
    """Group advisories by severity, env, model and leg, worst and widest first.

    `envs` / `models` narrow the report (and so a `--fail-on` gate) to one eval's
    routes; empty means the whole fleet.
    """
    require_table(store, ADVISORIES)
    where, params = _route_filter(envs, models)
    sql = _GROUPS_SQL.format(advisories=ADVISORIES.name, where=where)
    groups = store.query(sql, params).dicts()
    counts = store.query(
        "SELECT lower(severity) AS severity, COUNT(DISTINCT session_id) AS sessions "
        f"FROM {ADVISORIES.name} WHERE {where} GROUP BY lower(severity)", params
    ).dicts()
    sessions_by_severity = {r["severity"]: int(r["sessions"]) for r in counts}
    summary: dict[str, object] = {
        "caution groups": sum(1 for g in groups if g["severity"] == "caution"),
        "sessions with caution": sessions_by_severity.get("caution", 0),
        "info groups": sum(1 for g in groups if g["severity"] == "info"),
        "sessions with info": sessions_by_severity.get("info", 0),
    }
    if store.has_table(SESSIONS.name):
        total = store.query(f"SELECT COUNT(*) AS n FROM {SESSIONS.name} WHERE {where}",
                            params).rows[0][0]
        summary["sessions in store"] = int(total)
    return Report(
        name="advisories",
        title="Relay advisories across the fleet",
        columns=COLUMNS,
        rows=groups,
        row_classes=[str(g["severity"]) for g in groups],
        summary=summary,
        empty_message="No advisories: no relay converted any payload.",
    )


def gate_failed(report: Report, fail_on: str | None) -> bool:
    """Whether any group is at least as severe as `fail_on` ('caution' or 'info').

    `info` gates on everything known (info and caution): a stricter pipeline
    wants to hear about any conversion at all.
    """
    if fail_on is None:
        return False
    threshold = SEVERITY_RANK[fail_on]
    return any(SEVERITY_RANK.get(str(r["severity"]), 99) <= threshold for r in report.rows)

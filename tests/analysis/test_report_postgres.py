"""The reports give the same answers on PostgreSQL as on DuckDB (one portable SQL)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb
import psycopg
import pytest

from rlmesh_stream.consumers.analysis.reports import (
    advisory_report,
    delivery_report,
    episode_report,
    open_store,
    render,
    telemetry_report,
)
from rlmesh_stream.consumers.sinks import open_sink
from tests.analysis.analysis_stores import advisory, at, episode

pytestmark = pytest.mark.postgres

ROWS: dict[str, list[dict[str, Any]]] = {
    "advisories": [
        advisory("s1", "observation", "caution", "depth zero-filled", count=4, last_seen=at(9)),
        advisory("s2", "observation", "caution", "depth zero-filled", count=2),
        advisory("s2", "observation", "caution", "rgb clipped", count=5),
        advisory("s1", "action", "info", "cast", count=7, model_component_id="sac"),
    ],
    "episodes": [
        episode("s1", 1, cumulative_reward=10.0, success=True),
        episode("s1", 2, cumulative_reward=25.0, success=False, step_ms=0.7),
        episode("s1", 3, status="abandoned", model_component_id="sac"),
    ],
    "telemetry_sessions": [
        {"session_id": s, "op": "model.predict", "component": "model", "metric": "rpc.total",
         "kind": "Duration", "count": n, "avg": a, "p50": a, "p95": 2 * a, "p99": 3 * a,
         "env_id": "CartPole-v1", "model_component_id": "ppo"}
        for s, n, a in (("s1", 10, 1.5), ("s2", 30, 0.5))],
    "delivery_sequences": [  # sequences 0, 1 (twice) and 3, as contiguous ranges
        {"producer_id": "p", "first_seq": first, "last_seq": last, "records": n}
        for first, last, n in ((0, 1, 3), (3, 3, 1))],
}
BUILDS = {"advisories": advisory_report, "episodes": episode_report,
          "delivery": delivery_report, "telemetry": telemetry_report}


def _fill(url: str) -> None:
    open_sink(url).close()  # the consumers' own migration creates tables and views
    for table, rows in ROWS.items():
        for row in rows:
            values = {k: json.dumps(v) if k == "final_info" else v for k, v in row.items()}
            cols = ", ".join(f'"{c}"' for c in values)
            if url.startswith("duckdb://"):
                with duckdb.connect(url.removeprefix("duckdb://")) as con:
                    con.execute(f"INSERT INTO {table} ({cols}) VALUES "
                                f"({', '.join('?' for _ in values)})", list(values.values()))
            else:
                with psycopg.connect(url, autocommit=True) as con:
                    con.execute(f"INSERT INTO {table} ({cols}) VALUES "  # type: ignore[call-overload]
                                f"({', '.join('%s' for _ in values)})", list(values.values()))


def _report(url: str, name: str) -> dict[str, Any]:
    with open_store(url) as store:
        doc: dict[str, Any] = json.loads(render(BUILDS[name](store), "json"))
    return doc


@pytest.mark.parametrize("name", sorted(BUILDS))
def test_report_is_the_same_on_postgresql_as_on_duckdb(name: str, postgres_dsn: str,
                                                       tmp_path: Path) -> None:
    duck = f"duckdb://{tmp_path / 'same.duckdb'}"
    _fill(duck)
    _fill(postgres_dsn)
    on_duckdb, on_postgres = _report(duck, name), _report(postgres_dsn, name)
    assert on_postgres["summary"] == on_duckdb["summary"]
    assert len(on_postgres["rows"]) == len(on_duckdb["rows"]) > 0
    for pg_row, duck_row in zip(on_postgres["rows"], on_duckdb["rows"], strict=True):
        assert pg_row == pytest.approx(duck_row)

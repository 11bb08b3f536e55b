"""Hand-built DuckDB stores for the analysis tests.

Tables follow the table contract (column names fixed by the consumers'
builders). Rows are written by the tests themselves, so every expected number
in a test can be worked out by hand from the rows it inserted.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import duckdb

DDL = """
CREATE TABLE IF NOT EXISTS episodes (
    session_id VARCHAR NOT NULL, episode_record_id VARCHAR NOT NULL,
    episode_id VARCHAR, env_id VARCHAR, env_component_id VARCHAR,
    model_component_id VARCHAR, lane BIGINT, episode_index BIGINT, env_index INTEGER,
    seed BIGINT, trial_index UBIGINT, started_from_auto_reset BOOLEAN,
    status VARCHAR, step_count BIGINT, cumulative_reward DOUBLE,
    terminated BOOLEAN, truncated BOOLEAN, success BOOLEAN, duration_ms BIGINT,
    predict_ms DOUBLE, step_ms DOUBLE, final_info JSON,
    started_at TIMESTAMPTZ, completed_at TIMESTAMPTZ,
    PRIMARY KEY (session_id, episode_record_id)
);
CREATE TABLE IF NOT EXISTS sessions (
    session_id VARCHAR PRIMARY KEY, env_id VARCHAR, env_component_id VARCHAR,
    model_component_id VARCHAR, lane BIGINT, status VARCHAR, reason VARCHAR,
    total_steps BIGINT, total_episodes BIGINT, started_at TIMESTAMPTZ,
    ended_at TIMESTAMPTZ, env_connected_at TIMESTAMPTZ, model_connected_at TIMESTAMPTZ
);
CREATE TABLE IF NOT EXISTS advisories (
    session_id VARCHAR NOT NULL, leg VARCHAR NOT NULL, severity VARCHAR NOT NULL,
    message VARCHAR NOT NULL, "count" BIGINT, first_seen TIMESTAMPTZ,
    last_seen TIMESTAMPTZ, env_id VARCHAR, env_component_id VARCHAR,
    model_component_id VARCHAR, lane BIGINT,
    PRIMARY KEY (session_id, leg, severity, message)
);
"""

T0 = dt.datetime(2026, 3, 1, 12, 0, 0, tzinfo=dt.UTC)


def at(seconds: float) -> dt.datetime:
    """An instant `seconds` after T0 (UTC)."""
    return T0 + dt.timedelta(seconds=seconds)


def make_store(path: Path) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect(str(path))
    con.execute("SET TimeZone = 'UTC'")
    con.execute(DDL)
    return con


def insert(con: duckdb.DuckDBPyConnection, table: str, rows: Iterable[Mapping[str, Any]]) -> None:
    for row in rows:
        values = {k: json.dumps(v) if k == "final_info" and v is not None else v
                  for k, v in row.items()}
        cols = ", ".join(f'"{c}"' for c in values)
        marks = ", ".join("?" for _ in values)
        con.execute(f"INSERT INTO {table} ({cols}) VALUES ({marks})", list(values.values()))


def episode(session: str, index: int, **fields: Any) -> dict[str, Any]:
    """A completed episode row with plausible defaults; `fields` override them."""
    row: dict[str, Any] = {
        "session_id": session,
        "episode_record_id": f"ep-{index:06d}",
        "episode_id": f"{session}-e{index}",
        "env_id": "CartPole-v1",
        "env_component_id": "env-0",
        "model_component_id": "policy",
        "lane": None,
        "episode_index": index,
        "env_index": 0,
        "seed": index,
        "trial_index": index - 1,
        "started_from_auto_reset": index > 1,
        "status": "completed",
        "step_count": 10,
        "cumulative_reward": 10.0,
        "terminated": True,
        "truncated": False,
        "success": None,
        "duration_ms": 5,
        "predict_ms": 0.1,
        "step_ms": 0.2,
        "final_info": {},
        "started_at": at(index),
        "completed_at": at(index + 0.5),
    }
    row.update(fields)
    return row


def advisory(session: str, leg: str, severity: str, message: str, **fields: Any
             ) -> dict[str, Any]:
    row: dict[str, Any] = {
        "session_id": session, "leg": leg, "severity": severity, "message": message,
        "count": 1, "first_seen": at(0), "last_seen": at(0),
        "env_id": "CartPole-v1", "env_component_id": "env-0",
        "model_component_id": "policy", "lane": None,
    }
    row.update(fields)
    return row

"""Hand-built DuckDB stores for the analysis tests.

Tables are created from the consumers' table definitions (`rlmesh_stream.consumers.tables`).
Rows are written by the tests themselves, so every expected number
in a test can be worked out by hand from the rows it inserted.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import duckdb

from rlmesh_stream.consumers.table_model import Dialect, create_table_sql, create_view_sql
from rlmesh_stream.consumers.tables import TABLES, VIEWS

T0 = dt.datetime(2026, 3, 1, 12, 0, 0, tzinfo=dt.UTC)


def at(seconds: float) -> dt.datetime:
    """An instant `seconds` after T0 (UTC)."""
    return T0 + dt.timedelta(seconds=seconds)


def make_store(path: Path) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect(str(path))
    con.execute("SET TimeZone = 'UTC'")
    for table in TABLES:  # the consumers' own DDL, so reports meet the real schema
        con.execute(create_table_sql(table, Dialect.DUCKDB))
    for view in VIEWS:
        con.execute(create_view_sql(view))
    return con


def insert(con: duckdb.DuckDBPyConnection, table: str, rows: Iterable[Mapping[str, Any]]) -> None:
    for row in rows:
        values = {k: json.dumps(v) if k == "final_info" and v is not None else v
                  for k, v in row.items()}
        cols = ", ".join(f'"{c}"' for c in values)
        marks = ", ".join("?" for _ in values)
        con.execute(f"INSERT INTO {table} ({cols}) VALUES ({marks})", list(values.values()))


def episodes_store(tmp_path: Path, episodes: Iterable[Mapping[str, Any]]) -> str:
    """The sink URL of a new store in `tmp_path` holding `episodes` (rows of `episode`)."""
    path = tmp_path / "store.duckdb"
    con = make_store(path)
    insert(con, "episodes", episodes)
    con.close()
    return f"duckdb://{path}"


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

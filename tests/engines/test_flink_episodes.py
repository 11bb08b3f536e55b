"""The generated Flink episodes view, over the same fleet, equals the consumers' `episodes`
table row for row (every column Flink can carry; `final_info` is a MetaMap)."""

from __future__ import annotations

import math
import uuid
from pathlib import Path
from typing import Any

import pytest

from rlmesh_stream.consumers.builders import make_builders
from rlmesh_stream.consumers.flink.render import view_columns
from rlmesh_stream.consumers.runtime import ConsumerRuntime, RuntimeOptions
from rlmesh_stream.consumers.sinks import open_sink
from rlmesh_stream.consumers.tables import EPISODES
from rlmesh_stream.schemas.connection.config import StreamConfig
from tests.engines.engine_values import flink_timestamp_ms

pytestmark = [pytest.mark.stack, pytest.mark.slow]


def _consumers_episodes(config: StreamConfig, path: Path) -> list[dict[str, Any]]:
    sink = open_sink(f"duckdb://{path}")
    try:
        ConsumerRuntime(config, make_builders(["episodes"]), sink,
                        RuntimeOptions(group_id=f"g-{uuid.uuid4().hex[:8]}",
                                       from_beginning=True, until_end=True)).run()
        names = [c.name for c in view_columns(EPISODES)]
        rows = sink.query(f"SELECT {', '.join(names)} FROM episodes")
    finally:
        sink.close()
    return [dict(zip(names, row, strict=True)) for row in rows]


def _comparable(row: dict[str, Any]) -> dict[str, Any]:
    """Timestamps as epoch ms (Flink's JSON text, DuckDB's datetime)."""
    out = dict(row)
    for name in ("started_at", "completed_at"):
        value = out[name]
        if isinstance(value, str):
            out[name] = flink_timestamp_ms(value)
        elif value is not None:
            out[name] = round(value.timestamp() * 1000)
    return out


def test_flink_episodes_view_equals_the_consumers_table(
        fleet_config: StreamConfig, flink_rows: Any, tmp_path: Path) -> None:
    ours = {(r["session_id"], r["episode_record_id"]): _comparable(r)
            for r in _consumers_episodes(fleet_config, tmp_path / "tables.duckdb")}
    flink = {(r["session_id"], r["episode_record_id"]): _comparable(r)
             for r in flink_rows["view_episodes"]}
    assert sorted(flink) == sorted(ours)
    for key, row in ours.items():
        assert flink[key] == row, key
    statuses = {r["status"] for r in ours.values()}
    assert {"completed", "abandoned"} <= statuses, statuses
    assert not any(isinstance(v, float) and math.isnan(v) for r in ours.values()
                   for v in r.values())

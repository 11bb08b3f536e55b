"""`rlmesh-stream report telemetry`: per-operation telemetry across session snapshots."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from rlmesh_stream.consumers.analysis.report_cli import report
from tests.analysis.analysis_stores import insert, make_store


def snapshot_row(session: str, op: str, count: int, avg: float, p95: float, p99: float,
                 **fields: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "session_id": session, "op": op, "component": "model", "metric": "rpc.total",
        "kind": "Duration", "count": count, "avg": avg, "p50": avg, "p95": p95, "p99": p99,
        "env_id": "CartPole-v1", "env_component_id": "env", "model_component_id": "ppo",
        "lane": None,
    }
    row.update(fields)
    return row


@pytest.fixture
def sink(tmp_path: Path) -> str:
    path = tmp_path / "telemetry.duckdb"
    con = make_store(path)
    insert(con, "telemetry_sessions", [
        snapshot_row("s1", "model.predict", count=100, avg=2.0, p95=4.0, p99=9.0),
        snapshot_row("s2", "model.predict", count=300, avg=1.0, p95=2.0, p99=3.0),
        snapshot_row("s1", "env.step", count=100, avg=0.5, p95=0.7, p99=0.8,
                     component="env"),
        snapshot_row("s1", "env.step", count=100, avg=40.0, p95=41.0, p99=42.0,
                     component="env", metric="request.bytes", kind="Bytes"),
    ])
    con.close()
    return f"duckdb://{path}"


def _rows(sink: str, *args: str) -> list[dict[str, Any]]:
    result = CliRunner().invoke(report, ["telemetry", "--sink", sink, "--format", "json", *args])
    assert result.exit_code == 0, result.output
    rows: list[dict[str, Any]] = json.loads(result.stdout)["rows"]
    return rows


def test_one_row_per_operation_and_metric(sink: str) -> None:
    assert [(r["op"], r["metric"]) for r in _rows(sink)] == [
        ("env.step", "request.bytes"), ("env.step", "rpc.total"), ("model.predict", "rpc.total")]


def test_mean_is_weighted_by_sample_count(sink: str) -> None:
    predict = _rows(sink)[2]
    assert predict["samples"] == 400
    assert predict["mean"] == pytest.approx((100 * 2.0 + 300 * 1.0) / 400)


def test_p95_is_a_weighted_estimate_and_p99_the_largest_session_p99(sink: str) -> None:
    predict = _rows(sink)[2]
    assert predict["p95_est"] == pytest.approx((100 * 4.0 + 300 * 2.0) / 400)
    assert predict["p99_max"] == 9.0


def test_units_follow_the_metric_kind(sink: str) -> None:
    assert [r["unit"] for r in _rows(sink)] == ["B", "ms", "ms"]


def test_op_and_metric_filters(sink: str) -> None:
    rows = _rows(sink, "--op", "env.step", "--metric", "rpc.total")
    assert [(r["op"], r["metric"]) for r in rows] == [("env.step", "rpc.total")]


def test_an_op_that_matches_nothing_names_the_known_ops(sink: str) -> None:
    out = CliRunner().invoke(report, ["telemetry", "--sink", sink, "--op", "model.predcit"])
    assert out.exit_code == 0, out.output
    assert ("No telemetry rows for --op model.predcit. Known ops: env.step, model.predict."
            in out.stdout)

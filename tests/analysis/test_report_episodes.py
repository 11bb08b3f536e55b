"""`rlmesh-stream report episodes`: outcome statistics per env and model."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
from click.testing import CliRunner

from rlmesh_stream.consumers.analysis.report_cli import report
from tests.analysis.analysis_stores import episode, insert, make_store


@pytest.fixture
def sink(tmp_path: Path) -> str:
    path = tmp_path / "eps.duckdb"
    con = make_store(path)
    insert(con, "episodes", [
        episode("a", 1, cumulative_reward=10.0, success=True, step_count=10, step_ms=1.0),
        episode("a", 2, cumulative_reward=20.0, success=False, step_count=20, step_ms=2.0),
        episode("a", 3, cumulative_reward=30.0, success=True, step_count=30, step_ms=3.0),
        # outcome unknown: counted, but out of every mean
        episode("a", 4, status="running", cumulative_reward=999.0, success=None),
        episode("a", 5, status="abandoned", cumulative_reward=-999.0, success=False),
        episode("b", 1, model_component_id="other", cumulative_reward=5.0),
    ])
    con.close()
    return f"duckdb://{path}"


def _rows(sink: str) -> list[dict]:
    out = CliRunner().invoke(report, ["episodes", "--sink", sink, "--format", "json"])
    assert out.exit_code == 0, out.output
    return json.loads(out.stdout)["rows"]


def test_one_row_per_env_and_model(sink: str) -> None:
    assert [(r["env_id"], r["model_component_id"]) for r in _rows(sink)] == [
        ("CartPole-v1", "other"), ("CartPole-v1", "policy")]


def test_counts_episodes_by_status(sink: str) -> None:
    row = _rows(sink)[1]
    assert (row["episodes"], row["completed"], row["abandoned"], row["running"]) == (5, 3, 1, 1)


def test_success_rate_is_over_completed_episodes_that_report_success(sink: str) -> None:
    assert _rows(sink)[1]["success_rate"] == pytest.approx(2 / 3)


def test_reward_statistics_exclude_running_and_abandoned_episodes(sink: str) -> None:
    row = _rows(sink)[1]
    assert row["mean_reward"] == pytest.approx(20.0)
    assert row["std_reward"] == pytest.approx(statistics.stdev([10.0, 20.0, 30.0]))


def test_mean_steps_and_step_time(sink: str) -> None:
    row = _rows(sink)[1]
    assert (row["mean_steps"], row["mean_step_ms"]) == (pytest.approx(20.0), pytest.approx(2.0))


def test_success_rate_is_blank_when_the_env_reports_none(sink: str) -> None:
    out = CliRunner().invoke(report, ["episodes", "--sink", sink, "--format", "json"])
    doc = json.loads(out.stdout)
    assert doc["rows"][0]["success_rate"] is None
    assert any("reported no" in note for note in doc["notes"])


def test_a_store_locked_by_a_writer_is_a_clear_error(sink: str) -> None:
    import subprocess
    import sys

    path = sink.removeprefix("duckdb://")
    writer = subprocess.Popen(
        [sys.executable, "-c", "import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); "
         "print('locked', flush=True); time.sleep(60)", path],
        stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "locked"
        result = CliRunner().invoke(report, ["episodes", "--sink", sink])
    finally:
        writer.kill()
        writer.wait()
    assert result.exit_code == 1
    assert "DuckDB allows one writing process" in result.stderr


def test_a_file_that_is_not_duckdb_is_named_as_such_without_the_one_writer_hint(
        tmp_path: Path) -> None:
    path = tmp_path / "notes.duckdb"
    path.write_text("not a database\n")
    result = CliRunner().invoke(report, ["episodes", "--sink", f"duckdb://{path}"])
    assert result.exit_code == 1
    assert f"{path} is not a DuckDB database file" in result.stderr
    assert "one writing process" not in result.stderr

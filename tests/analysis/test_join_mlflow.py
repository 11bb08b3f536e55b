"""`join --mlflow-run`: MLflow runs (a SQLite store written with MLflow's client) as the log.

The runs hold the same points as the TensorBoard tests (analysis_training_logs),
so the expected rows are the same, and equal those of the same log as CSV.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from rlmesh_stream.consumers.analysis.join import (
    JoinSpec,
    LogColumns,
)
from rlmesh_stream.consumers.analysis.join_cli import join
from tests.analysis.analysis_join import join_rows
from tests.analysis.analysis_stores import at, episode, episodes_store
from tests.analysis.analysis_training_logs import LOSS, write_csv, write_mlflow

COLUMNS = LogColumns(metric=LOSS)


@pytest.fixture(scope="module")
def tracking_uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One SQLite tracking store for the module (creating its schema takes seconds)."""
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"


def mlflow_runs(uri: str, runs: list[str] | None = None) -> dict[str, str]:
    return write_mlflow(uri, f"exp-{uuid.uuid4().hex[:8]}", runs)


def run(sink: str, spec: JoinSpec) -> tuple[list[tuple[Any, ...]], list[dict[str, Any]], str]:
    """`join_rows`, with the result as its summary line (results of two stores compare so)."""
    rows, summary, result = join_rows(sink, spec)
    return rows, summary, result.summary()


def test_key_join_reads_a_runs_metric_history_at_the_checkpoints_step(
        tracking_uri: str, tmp_path: Path) -> None:
    ids = mlflow_runs(tracking_uri, ["ppo_1"])
    sink = episodes_store(tmp_path, [episode("s", i, model_component_id=m) for i, m in
                                enumerate(["ckpt-1000", "ckpt-2000", "ckpt-3000"], start=1)])
    rows, summary, _ = run(sink, JoinSpec("key", None, COLUMNS, checkpoint_step=r"ckpt-(\d+)",
                                          mlflow_runs=(ids["ppo_1"],),
                                          mlflow_tracking_uri=tracking_uri))
    assert rows == [("ep-000001", "ppo_1", 1000, 0.5, 20.0),
                    ("ep-000002", "ppo_1", 1000, 0.5, 20.0),
                    ("ep-000003", "ppo_1", 3000, 0.125, 80.0)]
    assert [(r["checkpoint"], r["step"], r["metric"]) for r in summary] == [
        ("ckpt-1000", 1000, 0.5), ("ckpt-2000", 2000, 0.5), ("ckpt-3000", 3000, 0.125)]


def test_asof_join_uses_the_metric_timestamps(tracking_uri: str, tmp_path: Path) -> None:
    ids = mlflow_runs(tracking_uri, ["ppo_1"])
    sink = episodes_store(tmp_path, [episode("s", i, started_at=at(t))
                                for i, t in enumerate([5, 20, 27, 40], start=1)])
    rows, _, _ = run(sink, JoinSpec("asof", None, COLUMNS, mlflow_runs=(ids["ppo_1"],),
                                    mlflow_tracking_uri=tracking_uri))
    assert [(r[0], r[2], r[3]) for r in rows] == [
        ("ep-000001", 0, 1.0), ("ep-000002", 1000, 0.5), ("ep-000003", 2500, 0.25),
        ("ep-000004", 3000, 0.125)]


@pytest.mark.parametrize("mode", ["key", "asof"])
def test_two_mlflow_runs_join_exactly_like_the_same_log_as_csv(
        tracking_uri: str, tmp_path: Path, mode: str) -> None:
    ids = mlflow_runs(tracking_uri)
    if mode == "key":
        spec = JoinSpec("key", None, COLUMNS, checkpoint_step=r"(?P<run>[^/]+)/ckpt-(?P<step>\d+)")
        episodes = [episode("s", i, model_component_id=m) for i, m in enumerate(
            ["ppo_1/ckpt-2000", "ppo_2/ckpt-400", "ppo_2/ckpt-3000", "ppo_1/ckpt-0"], start=1)]
    else:
        spec = JoinSpec("asof", None, COLUMNS, asof_match=("model_component_id", "run"))
        episodes = [episode("s", i, model_component_id=f"ppo_{1 + i % 2}", started_at=at(t))
                    for i, t in enumerate([-1, 3, 5, 12, 15, 22, 26, 31, 45], start=1)]
    sink = episodes_store(tmp_path, episodes)
    ml = run(sink, replace(spec, mlflow_runs=tuple(ids.values()),
                           mlflow_tracking_uri=tracking_uri))
    from_csv = run(sink, replace(spec, log=write_csv(tmp_path / "log.csv")))
    assert len(ml[0]) > 2
    assert ml == from_csv


def test_cli_reads_the_tracking_uri_from_the_environment(tracking_uri: str,
                                                         tmp_path: Path) -> None:
    ids = mlflow_runs(tracking_uri, ["ppo_1"])
    sink = episodes_store(tmp_path, [episode("s", 1, model_component_id="ckpt-3000")])
    result = CliRunner().invoke(join, [
        "--sink", sink, "--mlflow-run", ids["ppo_1"], "--checkpoint-step", r"ckpt-(\d+)",
        "--metric", LOSS, "--format", "json"], env={"MLFLOW_TRACKING_URI": tracking_uri})
    assert result.exit_code == 0, result.output
    assert "1 of 1 episodes matched" in result.stderr
    (row,) = json.loads(result.stdout)["rows"]
    assert (row["checkpoint"], row["step"], row["metric"]) == ("ckpt-3000", 3000, 0.125)


def test_a_local_file_store_reads_like_the_sqlite_store(tracking_uri: str, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # MLflow 3 opens a file store only when asked to (it is in maintenance mode)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    file_uri = (tmp_path / "mlruns").as_uri()
    episodes = [episode("s", i, model_component_id=m) for i, m in
                enumerate(["ckpt-1000", "ckpt-2000", "ckpt-3000"], start=1)]
    sink = episodes_store(tmp_path, episodes)
    spec = JoinSpec("key", None, COLUMNS, checkpoint_step=r"ckpt-(\d+)")
    results = [run(sink, replace(spec, mlflow_runs=(mlflow_runs(uri, ["ppo_1"])["ppo_1"],),
                                 mlflow_tracking_uri=uri))
               for uri in (file_uri, tracking_uri)]
    assert results[0] == results[1]
    assert len(results[0][0]) == 3

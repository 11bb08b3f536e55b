"""`join --to-tensorboard DIR` and `--to-mlflow-run RUN_ID`: the eval curve back in the tools.

What was written is read back as users see it: through TensorBoard's HTTP API in
its default loader (the `tensorboard` fixture) and `mlflow server`'s REST API (the
`mlflow` fixture), and with the tools' own readers (TensorBoard's
EventAccumulator, MlflowClient.get_metric_history); it is compared with the
per-checkpoint summary the same command printed (--format json). TensorBoard holds
scalars as float32, as TensorBoard's own writers write them.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from rlmesh_stream.consumers.analysis.join_cli import join
from rlmesh_stream.consumers.analysis.training_logs.writeback import EVAL_METRICS
from tests.analysis.analysis_stores import episode, episodes_store
from tests.analysis.analysis_training_logs import LOSS, write_mlflow, write_tensorboard
from tests.analysis.tool_servers import (
    Server,
    mlflow_create_run,
    mlflow_history,
    tensorboard_scalars,
    tensorboard_tags,
    wait_for,
)

# three checkpoints of ppo_1, two sessions each; rewards and successes of known mean
EPISODES = [
    episode("s", 1, model_component_id="ckpt-1000", cumulative_reward=10.0, success=False),
    episode("s", 2, model_component_id="ckpt-1000", cumulative_reward=14.0, success=True),
    episode("s", 3, model_component_id="ckpt-2000", cumulative_reward=30.0, success=True,
            step_ms=0.4),
    episode("t", 1, model_component_id="ckpt-2000", cumulative_reward=50.0, success=True),
    episode("t", 2, model_component_id="ckpt-3000", cumulative_reward=99.5, success=True),
]
EXPECTED = {  # step -> eval metric -> value, worked out from EPISODES
    1000: {"eval/success_rate": 0.5, "eval/mean_reward": 12.0, "eval/episodes": 2.0},
    2000: {"eval/success_rate": 1.0, "eval/mean_reward": 40.0, "eval/episodes": 2.0},
    3000: {"eval/success_rate": 1.0, "eval/mean_reward": 99.5, "eval/episodes": 1.0},
}


def join_cli(sink: str, logdir: Path, *extra: str, env: dict[str, str] | None = None
             ) -> list[dict[str, Any]]:
    """Run the join; its per-checkpoint summary as printed (json)."""
    result = CliRunner().invoke(join, [
        "--sink", sink, "--log", str(logdir), "--checkpoint-step", r"ckpt-(\d+)",
        "--metric", LOSS, "--format", "json", *extra], env=env)
    assert result.exit_code == 0, result.output
    rows: list[dict[str, Any]] = json.loads(result.stdout)["rows"]
    return rows


def summary_points(rows: list[dict[str, Any]], *, float32: bool = False
                   ) -> dict[str, list[tuple[int, float]]]:
    """The printed summary as (step, value) per eval metric (rounded as TensorBoard keeps
    scalars, with `float32`)."""
    def value(v: Any) -> float:
        return float(np.float32(v)) if float32 else float(v)

    return {metric: [(r["step"], value(r[col])) for r in rows if r[col] is not None]
            for metric, col in EVAL_METRICS.items()}


def tensorboard_points(directory: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing import event_accumulator as ea
    from tensorboard.util import tensor_util

    acc = ea.EventAccumulator(str(directory), size_guidance={ea.TENSORS: 0, ea.SCALARS: 0})
    acc.Reload()
    out = {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
    for tag in acc.Tags()["tensors"]:
        out[tag] = [(t.step, float(tensor_util.make_ndarray(t.tensor_proto)))
                    for t in acc.Tensors(tag)]
    return out


def test_to_tensorboard_writes_the_printed_summary_at_each_checkpoints_step(
        tmp_path: Path) -> None:
    logdir = write_tensorboard(tmp_path / "runs", ["ppo_1"])
    sink = episodes_store(tmp_path, EPISODES)
    rows = join_cli(sink, logdir, "--to-tensorboard", str(logdir / "eval"))
    written = tensorboard_points(logdir / "eval")
    assert written == summary_points(rows, float32=True)
    for step, metrics in EXPECTED.items():
        for metric, value in metrics.items():
            assert (step, value) in written[metric]
    assert [s for s, _ in written["eval/reward_std"]] == [1000, 2000]  # one episode: no spread


def test_to_tensorboard_twice_leaves_one_point_per_checkpoint_and_metric(tmp_path: Path) -> None:
    logdir = write_tensorboard(tmp_path / "runs", ["ppo_1"])
    sink = episodes_store(tmp_path, EPISODES)
    join_cli(sink, logdir, "--to-tensorboard", str(logdir / "eval"))
    rows = join_cli(sink, logdir, "--to-tensorboard", str(logdir / "eval"))
    assert len(list((logdir / "eval").glob("events.out.tfevents.*"))) == 1
    assert tensorboard_points(logdir / "eval") == summary_points(rows, float32=True)


def test_the_eval_run_sits_next_to_the_training_run_in_the_log_directory(
        tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_multiplexer import EventMultiplexer

    logdir = write_tensorboard(tmp_path / "runs", ["ppo_1"])
    sink = episodes_store(tmp_path, EPISODES)
    join_cli(sink, logdir / "ppo_1", "--to-tensorboard", str(logdir / "ppo_1_eval"))
    mux = EventMultiplexer().AddRunsFromDirectory(str(logdir))
    mux.Reload()
    assert sorted(mux.Runs()) == ["ppo_1", "ppo_1_eval"]


def test_tensorboards_server_in_its_default_loader_shows_every_eval_tag_and_value(
        tensorboard: Server, tensorboard_logdir: Path, tmp_path: Path) -> None:
    logdir = write_tensorboard(tensorboard_logdir / f"join-{uuid.uuid4().hex[:8]}", ["ppo_1"])
    sink = episodes_store(tmp_path, EPISODES)
    rows = join_cli(sink, logdir / "ppo_1", "--to-tensorboard", str(logdir / "ppo_1_eval"))
    run = f"{logdir.name}/ppo_1_eval"
    expected = summary_points(rows, float32=True)
    tags = wait_for(lambda: tensorboard_tags(tensorboard).get(run), timeout=60,
                    what=f"TensorBoard to list the scalars of run {run}")
    assert tags == sorted(EVAL_METRICS)
    assert {tag: tensorboard_scalars(tensorboard, run, tag) for tag in tags} == expected
    assert LOSS in tensorboard_tags(tensorboard)[f"{logdir.name}/ppo_1"]  # beside it


def test_mlflow_servers_rest_api_holds_the_printed_summary_as_metric_history(
        mlflow: Server, tmp_path: Path) -> None:
    run_id = mlflow_create_run(mlflow, "ppo_1")
    logdir = write_tensorboard(tmp_path / "runs", ["ppo_1"])
    sink = episodes_store(tmp_path, EPISODES)
    rows = join_cli(sink, logdir, "--to-mlflow-run", run_id,
                    "--mlflow-tracking-uri", mlflow.url)
    assert {m: mlflow_history(mlflow, run_id, m) for m in EVAL_METRICS} == summary_points(rows)


@pytest.fixture(scope="module")
def tracking_uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"


def mlflow_points(uri: str, run_id: str) -> dict[str, list[tuple[int, float]]]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    return {metric: sorted((m.step, m.value) for m in client.get_metric_history(run_id, metric))
            for metric in EVAL_METRICS}


def test_to_mlflow_run_logs_the_printed_summary_and_skips_it_the_second_time(
        tracking_uri: str, tmp_path: Path) -> None:
    run_id = write_mlflow(tracking_uri, f"exp-{uuid.uuid4().hex[:8]}", ["ppo_1"])["ppo_1"]
    logdir = write_tensorboard(tmp_path / "runs", ["ppo_1"])
    sink = episodes_store(tmp_path, EPISODES)
    env = {"MLFLOW_TRACKING_URI": tracking_uri}
    first = join_cli(sink, logdir, "--to-mlflow-run", run_id, env=env)
    assert mlflow_points(tracking_uri, run_id) == summary_points(first)
    second = CliRunner().invoke(join, [
        "--sink", sink, "--log", str(logdir), "--checkpoint-step", r"ckpt-(\d+)",
        "--metric", LOSS, "--to-mlflow-run", run_id], env=env)
    assert second.exit_code == 0, second.output
    assert "wrote 0 eval points (3 checkpoints)" in second.stderr
    assert "14 already there were skipped" in second.stderr
    assert mlflow_points(tracking_uri, run_id) == summary_points(first)


def test_an_eval_curve_written_into_the_training_runs_own_directory_is_not_read_as_training(
        tmp_path: Path) -> None:
    logdir = write_tensorboard(tmp_path / "runs", ["ppo_1"])
    sink = episodes_store(tmp_path, EPISODES)
    first = join_cli(sink, logdir, "--to-tensorboard", str(logdir / "ppo_1"))
    second = join_cli(sink, logdir, "--to-tensorboard", str(logdir / "ppo_1"))
    assert second == first
    assert sorted(tensorboard_points(logdir / "ppo_1")) == sorted(
        ["train/loss", "rollout/ep_rew_mean", *EVAL_METRICS])

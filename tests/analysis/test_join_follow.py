"""`join --follow` on the real stack: eval points appear in TensorBoard and MLflow while the
training log grows and a fleet evaluates successive checkpoints, and a SIGKILL of the
follower mid-run leaves exactly the points a batch `join` over the final data gives.

The fleet is rlmesh's own `rlmesh.run` with the bridge (CartPole, a hand-written policy),
publishing through `KafkaRuntimeHooks`; the training log is a tensorboardX run written as
the "training" advances; the follower is the `rlmesh-stream` command in a process of its
own; what it wrote is read through TensorBoard's HTTP API (default loader) and `mlflow
server`'s REST API.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from rlmesh_stream.consumers.analysis.join_cli import join
from rlmesh_stream.consumers.analysis.training_logs.writeback import EVAL_METRICS
from rlmesh_stream.infra.topics import ensure_topics
from rlmesh_stream.producer.hooks import KafkaRuntimeHooks
from rlmesh_stream.schemas.connection.config import StreamConfig
from tests.analysis.tool_servers import (
    Server,
    mlflow_create_run,
    mlflow_history,
    tensorboard_scalars,
    wait_for,
)
from tests.consumers.consumer_helpers import run_offline
from tests.publishing import close_delivered

STEPS = (1000, 2000, 3000, 4000)
SESSIONS, EPISODES = 2, 3  # per checkpoint: its evaluation is complete at 6 episodes
LOSS = "train/loss"
WAIT_S = 180.0  # a loaded 2-core machine: group join, TensorBoard's rescan, MLflow


def publish_evaluation(config: StreamConfig, step: int) -> None:
    """SESSIONS eval sessions of checkpoint `ckpt-<step>`, EPISODES CartPole episodes each."""
    import gymnasium as gym
    import rlmesh
    from rlmesh.numpy import Model

    from rlmesh_stream.producer.bridge import rlmesh_bridge

    hooks = KafkaRuntimeHooks(config=config, install_exit_handlers=False)
    try:
        for session in range(SESSIONS):
            bridge = rlmesh_bridge(hooks, env_id="CartPole-v1",
                                   model_component_id=f"ckpt-{step}")
            env = gym.make("CartPole-v1", max_episode_steps=200)
            seeds = [step + 10 * session + e for e in range(EPISODES)]
            # pushing toward the pole's lean alone: episodes of 25-60 steps by seed, so
            # each checkpoint's mean and spread of returns differ
            rlmesh.run(Model(lambda o: np.int64(o[2] > 0)), bridge.wrap(env),
                       seeds=seeds, hooks=bridge)
    finally:
        close_delivered(hooks)


class TrainingLog:
    """A TensorBoard run that grows as training advances: train/loss every 250 steps."""

    def __init__(self, directory: Path) -> None:
        from tensorboardX import SummaryWriter

        self.writer = SummaryWriter(logdir=str(directory))
        self.step = 0

    def advance_to(self, step: int) -> None:
        while self.step <= step:
            self.writer.add_scalar(LOSS, 1.0 / (1 + self.step / 1000), self.step)
            self.step += 250
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class FollowerProcess:
    """`rlmesh-stream join --follow ...` in a process of its own; stderr kept in a file."""

    def __init__(self, args: list[str], stderr: Path) -> None:
        self.args, self.stderr = args, stderr
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        cli = str(Path(sys.executable).parent / "rlmesh-stream")
        with open(self.stderr, "ab") as err:
            self.proc = subprocess.Popen([cli, "join", "--follow", *self.args],
                                         stdout=subprocess.DEVNULL, stderr=err)

    def signal(self, sig: signal.Signals) -> int:
        assert self.proc is not None
        self.proc.send_signal(sig)
        return self.proc.wait(timeout=120)

    def text(self) -> str:
        return self.stderr.read_text(errors="replace")

    def kill_if_running(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def follower_process() -> Iterator[list[FollowerProcess]]:
    made: list[FollowerProcess] = []
    yield made
    for f in made:
        f.kill_if_running()


def batch_join(config: StreamConfig, store: Path, log: Path) -> list[dict[str, Any]]:
    """The batch `join` over the final data: the topics consumed to their end, then joined."""
    run_offline(config, f"duckdb://{store}", ["episodes"],
                group_id=f"batch-{uuid.uuid4().hex[:8]}")
    result = CliRunner().invoke(join, [
        "--sink", f"duckdb://{store}", "--log", str(log), "--checkpoint-step", r"ckpt-(\d+)",
        "--metric", LOSS, "--format", "json"])
    assert result.exit_code == 0, result.output
    rows: list[dict[str, Any]] = json.loads(result.stdout)["rows"]
    return rows


def test_follow_writes_each_checkpoints_point_live_and_a_sigkill_leaves_the_batch_joins_points(
        stream_config: StreamConfig, tensorboard: Server, tensorboard_logdir: Path,
        mlflow: Server, tmp_path: Path, follower_process: list[FollowerProcess]) -> None:
    ensure_topics(stream_config, partitions=2, replication_factor=1)
    runs = tensorboard_logdir / f"follow-{uuid.uuid4().hex[:8]}"
    run_id = mlflow_create_run(mlflow, "ppo")
    training = TrainingLog(runs / "ppo")
    eval_run = f"{runs.name}/ppo_eval"
    follower = FollowerProcess([
        "--sink", f"duckdb://{tmp_path / 'follow.duckdb'}", "--log", str(runs / "ppo"),
        "--checkpoint-step", r"ckpt-(\d+)", "--metric", LOSS,
        "--eval-episodes", str(SESSIONS * EPISODES),
        "--to-tensorboard", str(runs / "ppo_eval"),
        "--to-mlflow-run", run_id, "--mlflow-tracking-uri", mlflow.url,
        "--bootstrap", stream_config.bootstrap, "--registry-url", stream_config.registry_url,
        "--topic-prefix", stream_config.topic_prefix], tmp_path / "follow.err")
    follower_process.append(follower)

    def visible(steps: tuple[int, ...]) -> bool:
        tb = [s for s, _ in tensorboard_scalars(tensorboard, eval_run, "eval/episodes")]
        ml = [s for s, _ in mlflow_history(mlflow, run_id, "eval/episodes")]
        return set(steps) <= set(tb) and set(steps) <= set(ml)

    try:
        training.advance_to(STEPS[0])
        follower.start()
        publish_evaluation(stream_config, STEPS[0])
        training.advance_to(STEPS[1])
        publish_evaluation(stream_config, STEPS[1])
        wait_for(lambda: visible(STEPS[:2]), WAIT_S,
                 "the first two checkpoints' points in TensorBoard and MLflow")
        assert follower.proc is not None and follower.proc.poll() is None  # still running

        training.advance_to(STEPS[2])
        publish_evaluation(stream_config, STEPS[2])
        assert follower.signal(signal.SIGKILL) == -signal.SIGKILL  # mid-run
        follower.start()  # the same store, outputs and group: it reads on
        training.advance_to(STEPS[3])
        publish_evaluation(stream_config, STEPS[3])
        wait_for(lambda: visible(STEPS), WAIT_S, "every checkpoint's point after the restart")
        assert follower.signal(signal.SIGTERM) == 0
    finally:
        training.close()

    text = follower.text()
    assert "checkpoints seen" in text  # what it waits for, shown
    expected = batch_join(stream_config, tmp_path / "batch.duckdb", runs / "ppo")
    assert [r["step"] for r in expected] == list(STEPS)
    for metric, col in EVAL_METRICS.items():
        want = [(r["step"], float(r[col])) for r in expected if r[col] is not None]
        assert mlflow_history(mlflow, run_id, metric) == want, metric
        assert tensorboard_scalars(tensorboard, eval_run, metric) == [
            (step, float(np.float32(value))) for step, value in want], metric

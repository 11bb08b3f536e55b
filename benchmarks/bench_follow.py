"""`join --follow` latency: an eval episode's completion to its point visible in the tools.

On the stack named by RLMESH_STREAM_BOOTSTRAP / RLMESH_STREAM_REGISTRY_URL, with a
TensorBoard server (default loader, `--reload_interval 1`) and an `mlflow server`
(SQLite) started here on 127.0.0.1. A training log grows (tensorboardX, train/loss
every 250 steps) while, round after round, one checkpoint `ckpt-<step>` is evaluated:
one rlmesh session of `--episodes` CartPole episodes through the bridge, published by
`KafkaRuntimeHooks`, and `join --follow --eval-episodes N` (a process of its own) writes
its point. Latency is from the moment the session's last episode completed (its
`rlmesh.run` returned; the hook holds its events) to the moment the checkpoint's
`eval/episodes` point is answered by TensorBoard's `/data/plugin/scalars/scalars` and,
separately, by MLflow's `metrics/get-history` (both polled every 50 ms).

What a round's latency holds: the producer's linger and delivery, the follower's
consumer checkpoint (1 s interval, sooner at the stream's head), its pass every 0.5 s
(the join over its store and the log), the MLflow write, and TensorBoard's own rescan
(1 s here; TensorBoard's default is 5 s, which adds up to 4 s more).

The first round also holds the follower's start (imports, group join, reading the topics
from their beginning): it is printed apart and left out of the percentiles.

Target: p95 under 5 s for both.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the tests' server helpers: tests.analysis.tool_servers

from rlmesh_stream.infra.topics import ensure_topics  # noqa: E402
from rlmesh_stream.producer.hooks import KafkaRuntimeHooks  # noqa: E402
from rlmesh_stream.schemas.connection.config import StreamConfig  # noqa: E402
from tests.analysis.tool_servers import (  # noqa: E402
    MLFLOW_SERVER_ENV,
    mlflow_command,
    mlflow_create_run,
    mlflow_history,
    mlflow_server,
    tensorboard_scalars,
    tensorboard_server,
)

TARGET_P95_S = 5.0
POLL_S = 0.05
ROUND_TIMEOUT_S = 60.0


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20, method="inclusive")[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30,
                        help="checkpoints evaluated after the first (the follower's start)")
    parser.add_argument("--episodes", type=int, default=2, help="episodes per checkpoint")
    args = parser.parse_args()

    import gymnasium as gym
    import rlmesh
    from rlmesh.numpy import Model
    from tensorboardX import SummaryWriter

    from rlmesh_stream.producer.bridge import rlmesh_bridge

    mlflow = mlflow_command()
    if mlflow is None:
        raise SystemExit(f"no mlflow server: set {MLFLOW_SERVER_ENV} to the `mlflow` of a "
                         "venv with the full mlflow (.ci/run makes one)")
    config = StreamConfig.from_env().with_prefix(f"bench-follow-{uuid.uuid4().hex[:8]}")
    ensure_topics(config, partitions=2, replication_factor=1)
    with tempfile.TemporaryDirectory(prefix="bench-follow-") as tmp_name:
        tmp = Path(tmp_name)
        logdir = tmp / "tensorboard"
        logdir.mkdir()
        with tensorboard_server(logdir) as tb, mlflow_server(tmp / "mlflow", mlflow) as ml:
            run_id = mlflow_create_run(ml, "ppo")
            writer = SummaryWriter(logdir=str(logdir / "ppo"))
            writer.add_scalar("train/loss", 1.0, 0)
            writer.flush()
            cli = str(Path(sys.executable).parent / "rlmesh-stream")
            err = open(tmp / "follow.err", "wb")  # noqa: SIM115 (closed below)
            follower = subprocess.Popen([
                cli, "join", "--follow", "--sink", f"duckdb://{tmp / 'follow.duckdb'}",
                "--log", str(logdir / "ppo"), "--checkpoint-step", r"ckpt-(\d+)",
                "--metric", "train/loss", "--eval-episodes", str(args.episodes),
                "--to-tensorboard", str(logdir / "ppo_eval"), "--to-mlflow-run", run_id,
                "--mlflow-tracking-uri", ml.url, "--bootstrap", config.bootstrap,
                "--registry-url", config.registry_url, "--topic-prefix", config.topic_prefix,
            ], stdout=subprocess.DEVNULL, stderr=err)
            hooks = KafkaRuntimeHooks(config=config, install_exit_handlers=False)
            load = os.getloadavg()[0]
            tb_lat: list[float] = []
            ml_lat: list[float] = []
            try:
                for r in range(args.rounds + 1):
                    step = 1000 * (r + 1)
                    for s in range(step - 750, step + 1, 250):
                        writer.add_scalar("train/loss", 1.0 / (1 + s / 1000), s)
                    writer.flush()
                    bridge = rlmesh_bridge(hooks, env_id="CartPole-v1",
                                           model_component_id=f"ckpt-{step}")
                    env = gym.make("CartPole-v1", max_episode_steps=50)
                    rlmesh.run(Model(lambda o: np.int64(o[2] > 0)), bridge.wrap(env),
                               seeds=list(range(step, step + args.episodes)), hooks=bridge)
                    done = time.monotonic()
                    seen: dict[str, float] = {}
                    while len(seen) < 2 and time.monotonic() - done < ROUND_TIMEOUT_S:
                        if "tb" not in seen and any(
                                s == step for s, _ in tensorboard_scalars(
                                    tb, "ppo_eval", "eval/episodes")):
                            seen["tb"] = time.monotonic() - done
                        if "ml" not in seen and any(
                                s == step for s, _ in mlflow_history(
                                    ml, run_id, "eval/episodes")):
                            seen["ml"] = time.monotonic() - done
                        time.sleep(POLL_S)
                    if len(seen) < 2:
                        raise SystemExit(f"round {r}: step {step} not visible within "
                                         f"{ROUND_TIMEOUT_S:.0f} s: {seen}; see {tmp}")
                    if r == 0:
                        print(f"first point after the follower's start: TensorBoard "
                              f"{seen['tb']:.2f} s, MLflow {seen['ml']:.2f} s", flush=True)
                        continue
                    tb_lat.append(seen["tb"])
                    ml_lat.append(seen["ml"])
                    print(f"round {r}/{args.rounds}: TensorBoard {seen['tb']:.2f} s, "
                          f"MLflow {seen['ml']:.2f} s", flush=True)
            finally:
                hooks.close(30)
                writer.close()
                follower.terminate()
                follower.wait(60)
                err.close()
    print(f"load average {load:.1f} at the first round, {os.getloadavg()[0]:.1f} at the end "
          f"({os.cpu_count()} cores); "
          f"{args.rounds} checkpoints x {args.episodes} episodes")
    for name, lat in (("TensorBoard HTTP API", tb_lat), ("MLflow REST API", ml_lat)):
        high = p95(lat)
        print(f"{name}: p50 {statistics.median(lat):.2f} s, p95 {high:.2f} s, "
              f"max {max(lat):.2f} s (target p95 < {TARGET_P95_S:.0f} s: "
              f"{'met' if high < TARGET_P95_S else 'MISSED'})")


if __name__ == "__main__":
    main()

"""Training logs of known content, written by the tools' own writers, and the same as CSV.

Two PPO runs log at non-uniform steps; each tag has its own steps (as SB3 and
CleanRL log losses per update and returns per finished episode). Values are
dyadic, so float32 TensorBoard scalars hold them exactly. Wall time of step s
is T0 + s/100 seconds (T0 from analysis_stores), the same in every format.

    run    tag                  step: value
    ppo_1  train/loss           0: 1.0   1000: 0.5   2500: 0.25   3000: 0.125
    ppo_1  rollout/ep_rew_mean  1000: 20.0   2000: 40.0   3000: 80.0
    ppo_2  train/loss           500: 2.0   1500: 1.5   3000: 0.75
    ppo_2  rollout/ep_rew_mean  1500: 10.0   3000: 30.0
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from pathlib import Path

from tests.analysis.analysis_stores import T0

LOSS, REWARD = "train/loss", "rollout/ep_rew_mean"
RUNS: dict[str, dict[str, dict[int, float]]] = {
    "ppo_1": {LOSS: {0: 1.0, 1000: 0.5, 2500: 0.25, 3000: 0.125},
              REWARD: {1000: 20.0, 2000: 40.0, 3000: 80.0}},
    "ppo_2": {LOSS: {500: 2.0, 1500: 1.5, 3000: 0.75},
              REWARD: {1500: 10.0, 3000: 30.0}},
}


def wall(step: int) -> float:
    """Epoch seconds at which `step` was logged."""
    return T0.timestamp() + step / 100


def points(runs: list[str] | None = None) -> Iterator[tuple[str, str, int, float]]:
    """(run, tag, step, value) in the order a trainer would log them (by step)."""
    for run in runs or list(RUNS):
        series = sorted((step, tag, value) for tag, by_step in RUNS[run].items()
                        for step, value in by_step.items())
        for step, tag, value in series:
            yield run, tag, step, value


def write_tensorboard(logdir: Path, runs: list[str] | None = None) -> Path:
    """One tensorboardX run directory per run under `logdir`."""
    from tensorboardX import SummaryWriter

    writers: dict[str, SummaryWriter] = {}
    try:
        for run, tag, step, value in points(runs):
            if run not in writers:
                writers[run] = SummaryWriter(logdir=str(logdir / run))
            writers[run].add_scalar(tag, value, step, walltime=wall(step))
    finally:
        for w in writers.values():
            w.close()
    return logdir


def write_csv(path: Path, runs: list[str] | None = None) -> Path:
    """The same points as one CSV row per run and step (empty where a tag was not logged)."""
    rows: dict[tuple[str, int], dict[str, float]] = {}
    for run, tag, step, value in points(runs):
        rows.setdefault((run, step), {})[tag] = value
    with path.open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["run", "step", "time", LOSS, REWARD])
        for (run, step), values in sorted(rows.items()):
            time = T0.fromtimestamp(wall(step), T0.tzinfo).isoformat()
            out.writerow([run, step, time, values.get(LOSS, ""), values.get(REWARD, "")])
    return path


def write_mlflow(tracking_uri: str, experiment: str, runs: list[str] | None = None
                 ) -> dict[str, str]:
    """One MLflow run per run, metrics logged with MLflow's client; run name -> run id."""
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    exp = client.create_experiment(experiment)
    ids: dict[str, str] = {}
    batches: dict[str, list[Metric]] = {}
    for run, tag, step, value in points(runs):
        if run not in ids:
            ids[run] = client.create_run(exp, run_name=run).info.run_id
        batches.setdefault(run, []).append(Metric(tag, value, int(wall(step) * 1000), step))
    for run, metrics in batches.items():
        client.log_batch(ids[run], metrics=metrics)
        client.set_terminated(ids[run])
    return ids

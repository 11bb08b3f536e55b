"""Put the join's per-checkpoint eval summary back where the training curves are.

Each checkpoint of the summary becomes one point per eval metric at the
checkpoint's training step, so TensorBoard or MLflow draws the eval curve on
the same step axis as the training loss.

Re-running a join never duplicates points:
- TensorBoard (`--to-tensorboard DIR`): overwrite. The eval points go to one
  event file of our own in DIR (suffix `.rlmesh-eval`); the previous such file
  is deleted first, so DIR shows the latest join's curve. Other files in DIR
  are never touched.
- MLflow (`--to-mlflow-run RUN_ID`): skip. MLflow's metric history is append
  only, so a point whose metric and step the run already has is not logged
  again; points that differ from the stored value are counted and reported.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlmesh_stream.consumers.analysis.training_logs.table import TrainingLogError

EVAL_METRICS = {
    "eval/success_rate": "success_rate",
    "eval/mean_reward": "mean_reward",
    "eval/reward_std": "std_reward",
    "eval/episodes": "episodes",
    "eval/mean_step_ms": "mean_step_ms",
}
"""Eval metric name -> column of the join's per-checkpoint summary."""
TB_SUFFIX = ".rlmesh-eval"  # the TensorBoard reader leaves these files out
_MLFLOW_BATCH = 1000  # MLflow's limit of metrics per log_batch call


@dataclass
class EvalPoints:
    """Per training step, the eval metrics to write; and the checkpoints left out."""

    by_step: dict[int, dict[str, float]]
    without_step: list[str]


@dataclass
class Written:
    points: int
    skipped: int = 0  # already in the run, same value
    differing: int = 0  # already in the run with another value (kept, not overwritten)
    where: str = ""


def eval_points(rows: Sequence[Mapping[str, Any]]) -> EvalPoints:
    """The summary's rows as points; refuses two checkpoints at one training step."""
    by_step: dict[int, dict[str, float]] = {}
    owner: dict[int, str] = {}
    without: list[str] = []
    for row in rows:
        step, name = row.get("step"), str(row.get("checkpoint"))
        if step is None:
            without.append(name)
            continue
        step = int(step)
        if step in owner:
            raise TrainingLogError(
                f"checkpoints {owner[step]!r} and {name!r} are both at training step {step}: "
                "one eval curve has one point per step (join one run at a time, or use --match)")
        owner[step] = name
        by_step[step] = {metric: float(row[col]) for metric, col in EVAL_METRICS.items()
                         if row.get(col) is not None}
    return EvalPoints(by_step, without)


def write_tensorboard(points: EvalPoints, directory: Path) -> Written:
    """Replace our eval event file in `directory` with these points.

    Written as TensorBoard's own writers write scalars (`scalar_event`); one event per
    checkpoint, holding its metrics.
    """
    if directory.exists() and not directory.is_dir():
        raise TrainingLogError(f"--to-tensorboard {directory} is a file, not a directory")
    directory.mkdir(parents=True, exist_ok=True)
    for old in directory.glob(f"events.out.tfevents.*{TB_SUFFIX}"):
        old.unlink()
    writer = EvalFileWriter(directory)
    count = 0
    try:
        for step, metrics in sorted(points.by_step.items()):
            count += writer.write(step, metrics)
    finally:
        writer.close()
    return Written(count, where=str(directory))


def scalar_event(step: int, metrics: Mapping[str, float], wall: float | None = None) -> Any:
    """One TensorBoard `Event` holding a scalar summary per metric at `step`.

    Each value is what `tf.summary.scalar` writes (TensorBoard's `scalar_pb`): a
    float32 tensor of the scalars plugin. TensorBoard's default loader (its Rust data
    server) shows float32 scalars, old-style or tensor, and drops double-precision
    ones, so a DT_DOUBLE scalar is visible only with `--load_fast=false`. A value
    reads back rounded to float32 (7 significant digits); MLflow keeps the double.
    """
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.plugins.scalar.summary_v2 import scalar_pb

    summary = summary_pb2.Summary()
    for tag, value in metrics.items():
        summary.value.extend(scalar_pb(tag, value).value)
    return event_pb2.Event(wall_time=time.time() if wall is None else wall, step=step,
                           summary=summary)


class EvalFileWriter:
    """Appends eval points to one new event file of ours in a directory.

    TensorBoard's own event file writer (the one `torch.utils.tensorboard` uses): a
    TFRecord file named `events.out.tfevents.<time>.<host>.<pid>.<n>.rlmesh-eval`,
    flushed after each point so a reader (TensorBoard, a restarted follower) sees it.
    """

    def __init__(self, directory: Path) -> None:
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        directory.mkdir(parents=True, exist_ok=True)
        self._writer = EventFileWriter(str(directory), filename_suffix=TB_SUFFIX)

    def write(self, step: int, metrics: Mapping[str, float]) -> int:
        """One checkpoint's metrics as one event, flushed; the number of scalars written."""
        if metrics:
            self._writer.add_event(scalar_event(step, metrics))
            self._writer.flush()
        return len(metrics)

    def close(self) -> None:
        self._writer.close()


def read_tensorboard_eval(directory: Path) -> dict[str, list[tuple[int, float]]]:
    """The eval curve in `directory` as TensorBoard reads it: tag -> [(step, value)]."""
    from tensorboard.backend.event_processing import event_accumulator as ea
    from tensorboard.util import tensor_util

    acc = ea.EventAccumulator(str(directory), size_guidance={ea.TENSORS: 0})
    acc.Reload()
    return {tag: [(int(t.step), float(tensor_util.make_ndarray(t.tensor_proto)))
                  for t in acc.Tensors(tag)] for tag in acc.Tags()[ea.TENSORS]}


def write_mlflow(points: EvalPoints, run_id: str, tracking_uri: str | None) -> Written:
    """Log the points into an existing MLflow run, skipping those it already has."""
    from rlmesh_stream.consumers.analysis.training_logs.mlflow import (
        client,
        get_run,
        mlflow_errors,
    )

    mlflow = client(tracking_uri)
    get_run(mlflow, run_id, tracking_uri)
    with mlflow_errors(tracking_uri):
        return _log_new(mlflow, points, run_id)


def _log_new(mlflow: Any, points: EvalPoints, run_id: str) -> Written:
    from mlflow.entities import Metric

    have: dict[tuple[str, int], float] = {}
    for metric in EVAL_METRICS:
        for m in mlflow.get_metric_history(run_id, metric):
            have[(metric, int(m.step))] = float(m.value)
    now = int(time.time() * 1000)
    new: list[Any] = []
    result = Written(0, where=f"MLflow run {run_id}")
    for step, metrics in sorted(points.by_step.items()):
        for metric, value in metrics.items():
            stored = have.get((metric, step))
            if stored is None:
                new.append(Metric(metric, value, now, step))
            elif stored == value:
                result.skipped += 1
            else:
                result.differing += 1
    for i in range(0, len(new), _MLFLOW_BATCH):
        mlflow.log_batch(run_id, metrics=new[i:i + _MLFLOW_BATCH])
    result.points = len(new)
    return result

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
    """Replace our eval event file in `directory` with these points (tensorboardX writer).

    Each point is a scalar summary of the scalars plugin holding a double, as
    `tf.summary.scalar` writes one: TensorBoard draws it like any scalar and reads
    back exactly the value the join printed (old-style `simple_value` is float32).
    """
    from tensorboardX import FileWriter
    from tensorboardX.proto.summary_pb2 import Summary, SummaryMetadata
    from tensorboardX.proto.tensor_pb2 import TensorProto
    from tensorboardX.proto.types_pb2 import DT_DOUBLE

    if directory.exists() and not directory.is_dir():
        raise TrainingLogError(f"--to-tensorboard {directory} is a file, not a directory")
    directory.mkdir(parents=True, exist_ok=True)
    for old in directory.glob(f"events.out.tfevents.*{TB_SUFFIX}"):
        old.unlink()
    scalars = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name="scalars"))
    writer = FileWriter(str(directory), filename_suffix=TB_SUFFIX)
    count = 0
    try:
        for step, metrics in sorted(points.by_step.items()):
            values = [Summary.Value(tag=tag, metadata=scalars,
                                    tensor=TensorProto(dtype=DT_DOUBLE, double_val=[value]))
                      for tag, value in metrics.items()]
            writer.add_summary(Summary(value=values), step)
            count += len(values)
    finally:
        writer.close()
    return Written(count, where=str(directory))


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

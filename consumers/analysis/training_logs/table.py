"""The shape every training-log reader returns: one row per run and training step.

TensorBoard and MLflow store one time series per metric (step, wall time, value).
The join wants rows: `run`, `step`, `time` (the earliest wall time of any metric
at that step: when the trainer reached it) and one column per metric, NULL where
the metric was not logged at that step.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

import pyarrow as pa

from rlmesh_stream.schemas.errors import RlmeshStreamError

RESERVED = ("run", "step", "time")
"""Column names of the rows themselves; a metric may not take one of them."""


class TrainingLogError(RlmeshStreamError):
    """A training log cannot be read; the message names the source and what is wrong."""


Point = tuple[str, str, int, float, float]
"""(run, metric, step, wall time in epoch seconds, value)."""


def rows_to_table(points: Iterable[Point], source: str) -> pa.Table:
    """Pivot metric points into rows (run, step) -> metric values, sorted by run and step."""
    rows: dict[tuple[str, int], dict[str, float]] = {}
    times: dict[tuple[str, int], float] = {}
    metrics: dict[str, None] = {}
    for run, metric, step, wall, value in points:
        if metric in RESERVED:
            raise TrainingLogError(
                f"{source} has a metric named {metric!r}, which is also the name of a row "
                f"column ({', '.join(RESERVED)}); rename the metric to join this log")
        key = (run, step)
        rows.setdefault(key, {})[metric] = value  # a later point of the same step wins
        times[key] = min(times.get(key, wall), wall)
        metrics.setdefault(metric)
    keys = sorted(rows)
    columns: dict[str, pa.Array] = {
        "run": pa.array([k[0] for k in keys], pa.string()),
        "step": pa.array([k[1] for k in keys], pa.int64()),
        "time": pa.array([dt.datetime.fromtimestamp(times[k], dt.UTC) for k in keys],
                         pa.timestamp("us", tz="UTC")),
    }
    for metric in metrics:
        columns[metric] = pa.array([rows[k].get(metric) for k in keys], pa.float64())
    return pa.table(columns)

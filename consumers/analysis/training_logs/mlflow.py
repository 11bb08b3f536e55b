"""Read the metric histories of MLflow runs into training-log rows.

Through `MlflowClient` only, so any tracking store MLflow supports works the
same: a local `sqlite:///…` or file store, a database, or a tracking server.
Every metric of the run is read with `get_metric_history` (step, timestamp in
ms, value). The rows' `run` is the run's name (its id when it has none, or
when two runs given share a name), so several runs can be told apart with
`--match`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pyarrow as pa

from rlmesh_stream.consumers.analysis.training_logs.table import (
    Point,
    TrainingLogError,
    rows_to_table,
)

HTTP_RETRIES = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1"}
"""A join is interactive: an unreachable tracking server fails in seconds, not after
MLflow's default 7 retries with doubling backoff (minutes). Set these variables to
override."""


def client(tracking_uri: str | None) -> Any:
    """An `MlflowClient` for `tracking_uri` (MLflow's own default when None)."""
    for name, value in HTTP_RETRIES.items():
        os.environ.setdefault(name, value)
    from mlflow.tracking import MlflowClient

    with mlflow_errors(tracking_uri):
        return MlflowClient(tracking_uri=tracking_uri)


@contextmanager
def mlflow_errors(tracking_uri: str | None, passing: tuple[str, ...] = ()) -> Iterator[None]:
    """MLflow's own refusals (a store it will not open, a server error) as one line;
    errors whose code is in `passing` are left to the caller."""
    from mlflow.exceptions import MlflowException

    try:
        yield
    except MlflowException as exc:
        if exc.error_code in passing:
            raise
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise TrainingLogError(f"MLflow tracking store {tracking_uri or '(default)'}: "
                               f"{first}") from exc


def get_run(mlflow: Any, run_id: str, tracking_uri: str | None) -> Any:
    """The run, or a TrainingLogError naming the run and the store."""
    from mlflow.exceptions import MlflowException

    try:
        with mlflow_errors(tracking_uri, passing=("RESOURCE_DOES_NOT_EXIST",)):
            return mlflow.get_run(run_id)
    except MlflowException as exc:
        where = tracking_uri or "MLflow's default tracking store"
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise TrainingLogError(f"no MLflow run {run_id!r} at {where}: {first}") from exc


def read_mlflow(run_ids: Sequence[str], tracking_uri: str | None) -> pa.Table:
    """The metric histories of `run_ids` as rows (run, step, time, one column per metric)."""
    mlflow = client(tracking_uri)
    runs = [get_run(mlflow, run_id, tracking_uri) for run_id in run_ids]
    with mlflow_errors(tracking_uri):
        return _read(mlflow, runs, run_ids)


def _read(mlflow: Any, runs: list[Any], run_ids: Sequence[str]) -> pa.Table:
    names = [r.info.run_name or r.info.run_id for r in runs]
    if len(set(names)) < len(names):
        names = [r.info.run_id for r in runs]

    def points() -> Iterator[Point]:
        for run, name in zip(runs, names, strict=True):
            for key in sorted(run.data.metrics):
                for m in mlflow.get_metric_history(run.info.run_id, key):
                    yield name, key, int(m.step), m.timestamp / 1000.0, float(m.value)

    label = "MLflow run" + ("s " if len(run_ids) > 1 else " ") + ", ".join(run_ids)
    table = rows_to_table(points(), label)
    if table.num_rows == 0:
        raise TrainingLogError(f"{label} has no metrics logged")
    return table

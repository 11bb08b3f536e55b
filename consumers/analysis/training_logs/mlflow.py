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
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa

from rlmesh_stream.consumers.analysis.training_logs.table import (
    Point,
    TrainingLogError,
    rows_to_table,
)
from rlmesh_stream.schemas.connection.redact import redact_secrets

HTTP_RETRIES = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1"}
"""A join is interactive: an unreachable tracking server fails in seconds, not after
MLflow's default 7 retries with doubling backoff (minutes). Set these variables to
override."""
_SQLITE_MAGIC = b"SQLite format 3\x00"  # the first 16 bytes of every SQLite database file
_MLFLOW_TABLES = {"experiments", "runs"}


def client(tracking_uri: str | None) -> Any:
    """An `MlflowClient` for `tracking_uri` (MLflow's own default when None), over a store
    that exists: the join reads runs, or logs into one, so it never creates a store."""
    for name, value in HTTP_RETRIES.items():
        os.environ.setdefault(name, value)
    from mlflow.tracking import MlflowClient, get_tracking_uri

    check_sqlite_store(tracking_uri or get_tracking_uri())
    check_database_store(tracking_uri or get_tracking_uri())
    with mlflow_errors(tracking_uri):
        return MlflowClient(tracking_uri=tracking_uri)


def check_database_store(uri: str) -> None:
    """Connect once to a database tracking store (PostgreSQL, MySQL, SQL Server) before
    MLflow does: MLflow retries a store it cannot reach 10 times with doubling sleeps
    (~100 s), logging each failure (the URL's password pieces included) on stderr."""
    from sqlalchemy import create_engine
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        backend = make_url(uri).get_backend_name()
    except ArgumentError:
        return  # not a database URI (a directory, http://...): MLflow's to judge
    if backend not in ("postgresql", "mysql", "mssql"):
        return
    try:
        engine = create_engine(uri, connect_args=(
            {"connect_timeout": 10} if backend == "postgresql" else {}))
        with engine.connect():
            pass
        engine.dispose()
    except Exception as exc:  # a driver's or SQLAlchemy's: any of them is the answer
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise TrainingLogError(redact_secrets(
            f"MLflow tracking store {uri}: cannot connect ({first})", uri)) from None


def check_sqlite_store(uri: str) -> None:
    """Refuse a `sqlite:` tracking URI whose file is not an MLflow store, before MLflow
    opens it: MLflow would create a 1 MB store at a mistyped path (and its folder), run its
    migrations in any other SQLite file, and answer a file that is no database with its SQL."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        url = make_url(uri)
    except ArgumentError:
        return  # not a database URI (a directory, http://...): MLflow's to judge
    if url.get_backend_name() != "sqlite":
        return
    where = f"MLflow tracking store {uri}"
    if not url.database or url.database == ":memory:":
        raise TrainingLogError(f"{where} names no file: an in-memory store holds no runs")
    path = Path(url.database)
    if not path.is_file():
        what = "is a directory" if path.is_dir() else "does not exist"
        raise TrainingLogError(f"{where}: {path} {what} (the join reads runs from an existing "
                               "store and never creates one: check the path)")
    with open(path, "rb") as file:
        head = file.read(len(_SQLITE_MAGIC))
    if head != _SQLITE_MAGIC:
        raise TrainingLogError(f"{where}: {path} is not an SQLite database")
    try:
        with closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)) as con:
            tables = {row[0] for row in con.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.Error as exc:
        raise TrainingLogError(f"{where}: cannot read {path}: {exc}") from exc
    if not _MLFLOW_TABLES.issubset(tables):
        raise TrainingLogError(f"{where}: {path} is an SQLite database but not an MLflow "
                               "tracking store (it has no runs or experiments table)")


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
        raise TrainingLogError(redact_secrets(
            f"MLflow tracking store {tracking_uri or '(default)'}: {first}",
            tracking_uri or "")) from exc


def get_run(mlflow: Any, run_id: str, tracking_uri: str | None) -> Any:
    """The run, or a TrainingLogError naming the run and the store."""
    from mlflow.exceptions import MlflowException

    try:
        with mlflow_errors(tracking_uri, passing=("RESOURCE_DOES_NOT_EXIST",)):
            return mlflow.get_run(run_id)
    except MlflowException as exc:
        where = tracking_uri or "MLflow's default tracking store"
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise TrainingLogError(redact_secrets(f"no MLflow run {run_id!r} at {where}: {first}",
                                              tracking_uri or "")) from exc


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

"""The training log read into the temp table `training_log`: a file (JSONL, CSV,
Parquet) or a TensorBoard log or MLflow run(s), its needed columns checked, each row's
instant added for an as-of join."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import duckdb

from rlmesh_stream.consumers.analysis.join.log_files import log_format_of, log_reader, unreadable
from rlmesh_stream.consumers.analysis.join.log_times import time_sql
from rlmesh_stream.consumers.analysis.join.spec import JoinError, JoinSpec
from rlmesh_stream.consumers.analysis.join.store import describe

if TYPE_CHECKING:  # pyarrow loads with the log readers, when one is read
    import pyarrow as pa


def load_training_log(con: duckdb.DuckDBPyConnection, spec: JoinSpec,
                      tool_log: pa.Table | None = None) -> list[str]:
    """Read the log (JSON lines or array, CSV, Parquet) into temp table `training_log`.

    Adds `_row` (1-based position, for error messages) and `_train_at` (the row's
    instant, as-of joins only).

    Returns the log's own column names. Text timestamps are read as text (not
    left to the reader's detection) so that every row is checked the same way.
    """
    path = spec.log
    relation = _tool_log(con, spec, tool_log)
    if relation is not None:
        fmt = "arrow"
        detected = describe(con, relation)
    else:
        assert path is not None
        if not path.exists():
            raise JoinError(f"training log {path} does not exist")
        fmt = log_format_of(path, spec.log_format)
        try:
            detected = describe(con, log_reader(path, fmt))
        except duckdb.Error as exc:
            raise unreadable(path, fmt, exc) from exc
        relation = log_reader(path, fmt)
    cols = spec.columns
    needed = {"step": cols.step}
    if spec.mode == "asof":
        needed["time"] = cols.time
    elif spec.checkpoint_step is None:
        needed["checkpoint"] = cols.checkpoint
    if cols.metric:
        needed["metric"] = cols.metric
    if spec.asof_match is not None:
        needed["match"] = spec.asof_match[1]
    if spec.checkpoint_step and "run" in re.compile(spec.checkpoint_step).groupindex:
        needed["run"] = "run"
    missing = [(role, name) for role, name in needed.items() if name not in detected]
    if missing:
        flags = {"metric": "--metric", "match": "--match", "run": "--checkpoint-step"}
        what = ", ".join(f"{role} column {name!r} ({flags.get(role, f'--{role}-column')})"
                         for role, name in missing)
        hint = (" (a log indexed by training step: pass --checkpoint-step REGEX to read the "
                "step from the episode's checkpoint id)" if "checkpoint" in dict(missing) else "")
        raise JoinError(f"training log {spec.log_name} has no {what}; "
                        f"its columns are: {', '.join(detected)}{hint}")
    # Only the as-of join reads the time column; a key join passes it through untouched.
    has_time = spec.mode == "asof"
    if has_time and fmt in ("csv", "jsonl") and _is_texty(detected[cols.time]):
        assert path is not None
        types = dict(detected)
        types[cols.time] = "VARCHAR"
        relation = log_reader(path, fmt, types if fmt == "jsonl" else {cols.time: "VARCHAR"})
    try:  # the whole file is read here (DESCRIBE samples its start)
        con.execute(f"CREATE OR REPLACE TEMP TABLE training_log_raw AS "
                    f"SELECT *, row_number() OVER () AS _row FROM {relation}")
    except duckdb.Error as exc:
        if path is None or fmt == "arrow":
            raise
        raise unreadable(path, fmt, exc) from exc
    time_type = describe(con, "training_log_raw")[cols.time] if has_time else None
    at_sql = time_sql(con, spec, time_type) if has_time else "NULL::TIMESTAMPTZ"
    con.execute(f"CREATE OR REPLACE TEMP TABLE training_log AS "
                f"SELECT *, {at_sql} AS _train_at FROM training_log_raw")
    if con.execute("SELECT COUNT(*) FROM training_log").fetchone() == (0,):
        raise JoinError(f"training log {spec.log_name} has no rows")
    return list(detected)


def _tool_log(con: duckdb.DuckDBPyConnection, spec: JoinSpec,
              table: pa.Table | None = None) -> str | None:
    """Register a TensorBoard log or MLflow run(s) (read here unless `table` holds its rows)
    as a relation; None for a file log."""
    from rlmesh_stream.consumers.analysis.training_logs import TrainingLogError
    from rlmesh_stream.consumers.analysis.training_logs.tensorboard import is_tensorboard_log

    log = spec.log
    is_tb = log is not None and spec.log_format is None and is_tensorboard_log(log)
    if not spec.mlflow_runs and not is_tb:
        return None
    if table is not None:
        con.register("training_log_source", table)
        return "training_log_source"
    try:
        if spec.mlflow_runs:
            from rlmesh_stream.consumers.analysis.training_logs.mlflow import read_mlflow

            table = read_mlflow(spec.mlflow_runs, spec.mlflow_tracking_uri)
        else:
            from rlmesh_stream.consumers.analysis.training_logs.tensorboard import (
                read_tensorboard,
            )

            assert log is not None
            table = read_tensorboard(log)
    except ImportError as exc:
        raise JoinError(f"reading {spec.log_name} needs {exc.name}: pip install "
                        "'rlmesh-stream[training-logs]'") from exc
    except TrainingLogError as exc:
        raise JoinError(str(exc)) from exc
    con.register("training_log_source", table)
    return "training_log_source"


def _is_texty(type_name: str) -> bool:
    return type_name in ("VARCHAR", "DATE", "TIME") or type_name.startswith("TIMESTAMP")

"""Join episodes with a training log, inside DuckDB.

An eval number is read against training: which checkpoint, at which training
step, with what loss. A training log (JSONL, CSV or Parquet, typically one row
per step: a step, a wall-clock time, a checkpoint id, metrics; or a TensorBoard
log directory or MLflow run, read into such rows by `training_logs`) is joined
to the `episodes` table in one of two ways:

- `key`: an episode's `model_component_id` (configurable) equals the log's
  checkpoint column. A checkpoint's row is the *first* log row naming it (the
  step at which it was saved), so logs that repeat the current checkpoint on
  every step still give one row per checkpoint. Step-indexed logs (TensorBoard,
  MLflow) name no checkpoint: `checkpoint_step`, a regex, takes the training
  step from the episode's key (`ckpt-([0-9]+)`), and the checkpoint's row is the
  latest log row at or before that step that has the metric.
- `asof`: each episode gets the latest log row at or before its `started_at`
  (or `completed_at`): the policy version that was live when it ran, for actors
  that follow a moving checkpoint. This is DuckDB's ASOF join.

Everything runs as SQL in an in-memory DuckDB that attaches the store, so the
work is the database's joins, never a Python loop over rows. Timestamps are
normalised to instants first; a timestamp without a UTC offset is ambiguous
and refused unless the caller names the log's time zone, and with a zone named,
local times that a DST change makes ambiguous or nonexistent are refused too.

Where each part lives: `spec` (what is asked and answered), `store` (the DuckDB with the
store attached), `training_log`, `log_files` and `log_times` (reading the log, its
formats and its times), `matching` (`run_join`), `by_key` and `by_asof` (the two joins'
SQL), `outputs` (aggregate, write back, export). The names are re-exported here.
"""

from __future__ import annotations

from rlmesh_stream.consumers.analysis.join.log_files import log_format_of
from rlmesh_stream.consumers.analysis.join.matching import run_join
from rlmesh_stream.consumers.analysis.join.outputs import aggregate, export, write_table
from rlmesh_stream.consumers.analysis.join.spec import (
    LOG_FORMATS,
    TRAIN_PREFIX,
    EpisodeTime,
    JoinError,
    JoinResult,
    JoinSpec,
    LogColumns,
    Mode,
)
from rlmesh_stream.consumers.analysis.join.store import connect
from rlmesh_stream.consumers.analysis.join.training_log import load_training_log

__all__ = [
    "LOG_FORMATS",
    "TRAIN_PREFIX",
    "EpisodeTime",
    "JoinError",
    "JoinResult",
    "JoinSpec",
    "LogColumns",
    "Mode",
    "aggregate",
    "connect",
    "export",
    "load_training_log",
    "log_format_of",
    "run_join",
    "write_table",
]

"""`run_join`: which join runs (by key, by key with a step read from the key, as of a
time), the checks before it (the episodes' columns, `--checkpoint-step`, several runs on
one step axis), and the temp table `joined` it leaves."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import duckdb

from rlmesh_stream.consumers.analysis.join.by_asof import asof_join
from rlmesh_stream.consumers.analysis.join.by_key import key_join, step_join
from rlmesh_stream.consumers.analysis.join.spec import TRAIN_PREFIX, JoinError, JoinResult, JoinSpec
from rlmesh_stream.consumers.analysis.join.store import describe, scalar
from rlmesh_stream.consumers.analysis.join.training_log import load_training_log
from rlmesh_stream.consumers.analysis.sql import q
from rlmesh_stream.consumers.tables import EPISODES

if TYPE_CHECKING:  # pyarrow loads with the log readers, when one is read
    import pyarrow as pa


def run_join(con: duckdb.DuckDBPyConnection, spec: JoinSpec,
             tool_log: pa.Table | None = None) -> JoinResult:
    """Build temp table `joined` (matched episodes + `train_*` columns) and explain the rest.

    `tool_log`: the TensorBoard or MLflow log already read into rows (`join --follow`
    reads it again only when its files changed)."""
    episode_cols = describe(con, f"store.{EPISODES.name}") if _has_episodes(con) else {}
    if not episode_cols:
        raise JoinError("the store has no `episodes` table yet (has `rlmesh-stream consume` "
                        "run with the episodes builder?)")
    wanted: list[str] = [spec.episode_key if spec.mode == "key" else spec.episode_time]
    if spec.asof_match is not None:
        wanted.append(spec.asof_match[0])
    if spec.mode == "key" and spec.asof_match is not None and spec.checkpoint_step is None:
        raise JoinError("--match applies to --by asof, or to --by key with --checkpoint-step")
    step_group = _step_group(spec, spec.checkpoint_step) if spec.checkpoint_step else 0
    for name in wanted:
        if name not in episode_cols:
            raise JoinError(f"episodes have no column {name!r}; "
                            f"they have: {', '.join(episode_cols)}")
    log_cols = load_training_log(con, spec, tool_log)
    total = scalar(con, f"SELECT COUNT(*) FROM store.{EPISODES.name}")
    if total == 0:
        raise JoinError("the store has no episodes to join")
    train_select = ", ".join(
        f"l.{q('_train_at') if c == spec.columns.time and spec.mode == 'asof' else q(c)} "
        f"AS {q(TRAIN_PREFIX + c)}" for c in log_cols)
    _refuse_mixed_runs(con, spec, log_cols)
    if spec.mode == "key" and step_group:
        result = step_join(con, spec, train_select, total, step_group)
    elif spec.mode == "key":
        result = key_join(con, spec, train_select, total)
    else:
        result = asof_join(con, spec, train_select, total)
    result.log_columns = log_cols
    if result.matched == 0:
        raise JoinError("no episode matched the training log: " + result.summary()
                        + "".join(f". {n}" for n in result.notes))
    return result


def _step_group(spec: JoinSpec, pattern: str) -> int:
    """The number of the regex group holding the step: the one named `step`, else the first."""
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise JoinError(f"--checkpoint-step '{pattern}' is not a regular expression: "
                        f"{exc}") from exc
    if compiled.groups == 0:
        raise JoinError(f"--checkpoint-step '{pattern}' has no group: put the step's digits "
                        r"in parentheses, e.g. 'ckpt-(\d+)'")
    if "run" in compiled.groupindex and spec.asof_match is not None:
        raise JoinError("--checkpoint-step with a group named 'run' already matches each "
                        "episode to its run: drop --match")
    return compiled.groupindex.get("step", 1)


def _refuse_mixed_runs(con: duckdb.DuckDBPyConnection, spec: JoinSpec,
                       log_cols: list[str]) -> None:
    """Several TensorBoard or MLflow runs share one step axis: say which run (--match)."""
    if spec.asof_match is not None or "run" not in log_cols:
        return
    if spec.checkpoint_step and "run" in re.compile(spec.checkpoint_step).groupindex:
        return
    from rlmesh_stream.consumers.analysis.training_logs.tensorboard import is_tensorboard_log

    if not spec.mlflow_runs and not (spec.log is not None and spec.log_format is None
                                     and is_tensorboard_log(spec.log)):
        return
    runs = [r[0] for r in con.execute(
        "SELECT DISTINCT run FROM training_log ORDER BY 1 LIMIT 6").fetchall()]
    if len(runs) > 1:
        raise JoinError(
            f"training log {spec.log_name} holds several runs ({', '.join(runs[:5])}"
            f"{', ...' if len(runs) > 5 else ''}) on one step axis: pass --match "
            "EPISODE_COL=run to join each episode with its own run (or --log one run's "
            "directory)")


def _has_episodes(con: duckdb.DuckDBPyConnection) -> bool:
    return scalar(con, "SELECT COUNT(*) FROM information_schema.tables "
                       "WHERE table_catalog = 'store' AND table_name = ?", [EPISODES.name]) > 0

"""`--by asof`: each episode joined to the latest log row at or before its start (or
completion), DuckDB's ASOF join, per run with `--match`; with the counts of the rest."""

from __future__ import annotations

import duckdb

from rlmesh_stream.consumers.analysis.join.run_match import RunMatch, count_early
from rlmesh_stream.consumers.analysis.join.spec import TRAIN_PREFIX, JoinResult, JoinSpec
from rlmesh_stream.consumers.analysis.join.store import describe, scalar
from rlmesh_stream.consumers.analysis.sql import q
from rlmesh_stream.consumers.tables import EPISODES


def asof_join(con: duckdb.DuckDBPyConnection, spec: JoinSpec, train_select: str,
              total: int) -> JoinResult:
    et, step = q(spec.episode_time), q(spec.columns.step)
    # With `asof_match`, each episode only looks at the log rows of its own run
    # (an equality condition of the ASOF join): the timeline is per match key.
    match = None if spec.asof_match is None else RunMatch(*spec.asof_match)
    partition = "_train_at" if match is None else match.partition + "_train_at"
    # One row per instant (and key): two log rows at the same time would make the
    # match arbitrary. A log without checkpoints (TensorBoard, MLflow: one row per step,
    # each metric logged at its own steps) offers only the rows that have the metric.
    has_metric = ""
    if spec.columns.metric and spec.columns.checkpoint not in describe(con, "training_log"):
        has_metric = f" AND {q(spec.columns.metric)} IS NOT NULL"
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE timeline AS
        SELECT * FROM training_log WHERE _train_at IS NOT NULL{has_metric}
        QUALIFY row_number() OVER (PARTITION BY {partition}
                                   ORDER BY {step} DESC NULLS LAST, _row DESC) = 1""")
    on = "" if match is None else match.on
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE joined AS
        SELECT e.*, {train_select}
        FROM store.{EPISODES.name} e
        ASOF JOIN timeline l ON {on}e.{et} >= l._train_at""")
    matched = scalar(con, "SELECT COUNT(*) FROM joined")
    first = scalar(con, "SELECT MIN(_train_at) FROM timeline")
    no_time = scalar(con, f"SELECT COUNT(*) FROM store.{EPISODES.name} WHERE {et} IS NULL")
    group = (TRAIN_PREFIX + spec.columns.checkpoint
             if spec.columns.checkpoint in describe(con, "training_log")
             else TRAIN_PREFIX + spec.columns.step)
    result = JoinResult("asof", total, matched, group_column=group)
    if group == TRAIN_PREFIX + spec.columns.step and spec.asof_match is not None:
        # runs share the step axis: a checkpoint is a run's step (ppo_1/3000)
        result.group_run = TRAIN_PREFIX + spec.asof_match[1]
    why_no_time = ("not completed yet" if spec.episode_time == "completed_at"
                   else "whose start was never seen")
    result.unmatched = {f"have no {spec.episode_time} ({why_no_time})": no_time}
    early = total - matched - no_time
    count_early(con, result, match, early, episodes=f"store.{EPISODES.name}",
                joinable=f"e.{et} IS NOT NULL", timeline="timeline",
                before=f"{spec.episode_time.removesuffix('_at')} before the first training-log row",
                first_row=str(first))
    without = (scalar(con, f"SELECT COUNT(*) FROM training_log WHERE _train_at IS NOT NULL "
                           f"AND {q(spec.columns.metric or '')} IS NULL") if has_metric else 0)
    if without:
        result.notes.append(f"{without} log rows without {spec.columns.metric!r} were not "
                            "matched (a log without checkpoints is matched on its metric)")
    dropped = scalar(con, "SELECT COUNT(*) FROM training_log WHERE _train_at IS NULL")
    if dropped:
        result.notes.append(f"{dropped} log rows without a time were left out")
    same_time = scalar(con, f"SELECT (SELECT COUNT(*) FROM training_log "
                            f"WHERE _train_at IS NOT NULL{has_metric}) - COUNT(*) FROM timeline")
    if same_time:
        result.notes.append(f"{same_time} log rows share a time with another; "
                            "the one with the highest step was kept")
    return result

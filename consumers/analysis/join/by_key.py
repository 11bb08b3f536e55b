"""`--by key`: each episode joined to its checkpoint's log row, named by the episode's
key (the checkpoint's first row), or, for a step-indexed log, the latest row at or
before the step `--checkpoint-step` reads from the key; with the counts of the rest."""

from __future__ import annotations

import re

import duckdb

from rlmesh_stream.consumers.analysis.join.run_match import RunMatch, count_early
from rlmesh_stream.consumers.analysis.join.spec import TRAIN_PREFIX, JoinError, JoinResult, JoinSpec
from rlmesh_stream.consumers.analysis.join.store import scalar
from rlmesh_stream.consumers.analysis.sql import q, sql_str
from rlmesh_stream.consumers.tables import EPISODES


def key_join(con: duckdb.DuckDBPyConnection, spec: JoinSpec, train_select: str,
             total: int) -> JoinResult:
    ck, step, key = q(spec.columns.checkpoint), q(spec.columns.step), q(spec.episode_key)
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE checkpoint_rows AS
        SELECT * FROM training_log WHERE {ck} IS NOT NULL
        QUALIFY row_number() OVER (PARTITION BY CAST({ck} AS VARCHAR)
                                   ORDER BY {step} NULLS LAST, _row) = 1""")
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE joined AS
        SELECT e.*, {train_select}
        FROM store.{EPISODES.name} e
        JOIN checkpoint_rows l ON CAST(e.{key} AS VARCHAR) = CAST(l.{ck} AS VARCHAR)""")
    matched = scalar(con, "SELECT COUNT(*) FROM joined")
    no_key = scalar(con, f"SELECT COUNT(*) FROM store.{EPISODES.name} WHERE {key} IS NULL")
    result = JoinResult("key", total, matched, group_column=TRAIN_PREFIX + spec.columns.checkpoint)
    result.unmatched = {f"have no {spec.episode_key}": no_key,
                        f"have a {spec.episode_key} that is not in the log's "
                        f"{spec.columns.checkpoint!r} column": total - matched - no_key}
    if total - matched - no_key:
        missing = [r[0] for r in con.execute(f"""
            SELECT DISTINCT CAST({key} AS VARCHAR) AS k FROM store.{EPISODES.name}
            WHERE {key} IS NOT NULL AND CAST({key} AS VARCHAR) NOT IN
                (SELECT CAST({ck} AS VARCHAR) FROM checkpoint_rows) ORDER BY k LIMIT 5
            """).fetchall()]
        known = [r[0] for r in con.execute(
            f"SELECT CAST({ck} AS VARCHAR) FROM checkpoint_rows ORDER BY {step} LIMIT 5"
        ).fetchall()]
        result.notes.append(f"unmatched {spec.episode_key} values include {missing}; "
                            f"the log's checkpoints include {known}")
    repeated = scalar(con, f"SELECT COUNT(*) - COUNT(DISTINCT CAST({ck} AS VARCHAR)) "
                           f"FROM training_log WHERE {ck} IS NOT NULL")
    if repeated:
        result.notes.append(f"{repeated} log rows repeat a checkpoint; each checkpoint is "
                            "joined to its first row (lowest step)")
    return result


def step_join(con: duckdb.DuckDBPyConnection, spec: JoinSpec, train_select: str,
              total: int, group: int) -> JoinResult:
    """Key join for step-indexed logs: the step is read from the episode key by regex,
    and the checkpoint's row is the latest log row at or before it (that has the metric)."""
    assert spec.checkpoint_step is not None
    key, step = q(spec.episode_key), q(spec.columns.step)
    pattern = sql_str(spec.checkpoint_step)
    run_group = re.compile(spec.checkpoint_step).groupindex.get("run")
    run_sql = (f", NULLIF(regexp_extract(CAST({key} AS VARCHAR), '{pattern}', {run_group}), '') "
               "AS checkpoint_run" if run_group else "")
    try:
        con.execute(f"""
            CREATE OR REPLACE TEMP TABLE episode_steps AS
            SELECT *, TRY_CAST(NULLIF(regexp_extract(CAST({key} AS VARCHAR), '{pattern}',
                                                     {group}), '') AS BIGINT) AS checkpoint_step
                   {run_sql}
            FROM store.episodes""")
    except duckdb.Error as exc:
        raise JoinError(f"--checkpoint-step '{spec.checkpoint_step}' cannot be used: "
                        f"{exc}") from exc
    has_metric = f" AND {q(spec.columns.metric)} IS NOT NULL" if spec.columns.metric else ""
    match = RunMatch("checkpoint_run", "run") if run_group else (
        None if spec.asof_match is None else RunMatch(*spec.asof_match))
    on = "" if match is None else match.on
    partition = "" if match is None else match.partition
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE step_timeline AS
        SELECT * FROM training_log WHERE {step} IS NOT NULL{has_metric}
        QUALIFY row_number() OVER (PARTITION BY {partition}{step} ORDER BY _row DESC) = 1""")
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE joined AS
        SELECT e.*, {train_select}
        FROM episode_steps e
        ASOF JOIN step_timeline l ON {on}e.checkpoint_step >= l.{step}""")
    matched = scalar(con, "SELECT COUNT(*) FROM joined")
    no_key = scalar(con, f"SELECT COUNT(*) FROM episode_steps WHERE {key} IS NULL")
    no_step = scalar(con, f"SELECT COUNT(*) FROM episode_steps "
                          f"WHERE {key} IS NOT NULL AND checkpoint_step IS NULL")
    result = JoinResult("key", total, matched, group_column=spec.episode_key,
                        step_column="checkpoint_step")
    result.unmatched = {f"have no {spec.episode_key}": no_key,
                        f"have a {spec.episode_key} that --checkpoint-step "
                        f"'{spec.checkpoint_step}' does not match": no_step}
    early = total - matched - no_key - no_step
    rows_with = f"log row with {spec.columns.metric!r}" if has_metric else "log row"
    first = scalar(con, f"SELECT MIN({step}) FROM step_timeline")
    count_early(con, result, match, early, episodes="episode_steps",
                joinable="e.checkpoint_step IS NOT NULL", timeline="step_timeline",
                before=f"have a checkpoint step before the first {rows_with}",
                first_row=f"step {first}")
    if no_step:
        examples = [r[0] for r in con.execute(
            f"SELECT DISTINCT CAST({key} AS VARCHAR) AS k FROM episode_steps WHERE "
            f"{key} IS NOT NULL AND checkpoint_step IS NULL ORDER BY k LIMIT 5").fetchall()]
        result.notes.append(f"{spec.episode_key} values that --checkpoint-step does not "
                            f"match include {examples}")
    return result

"""What the join gives: the per-checkpoint aggregate, the joined rows written back to
the store as a table, or exported to CSV or Parquet."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import duckdb

from rlmesh_stream.consumers.analysis.join.spec import TRAIN_PREFIX, JoinError, JoinResult, JoinSpec
from rlmesh_stream.consumers.analysis.join.store import scalar
from rlmesh_stream.consumers.analysis.sql import q, sql_str
from rlmesh_stream.consumers.sinks.url import SinkURL, as_sink_url
from rlmesh_stream.consumers.tables import is_consumers_own


def aggregate(con: duckdb.DuckDBPyConnection, spec: JoinSpec,
              result: JoinResult) -> list[dict[str, Any]]:
    """Per checkpoint (or per training step, for a log without checkpoints):
    episodes, success rate, reward mean and spread, mean step time, and the
    training step and metric of the checkpoint's first log row."""
    label, groups, step = group_sql(spec, result)
    metric = (f"arg_min({q(TRAIN_PREFIX + spec.columns.metric)}, {step})"
              if spec.columns.metric else "NULL")
    cur = con.execute(f"""
        SELECT {label} AS checkpoint,
               MIN({step}) AS step,
               {metric} AS metric,
               COUNT(*) AS episodes,
               COUNT(*) FILTER (WHERE status = 'completed') AS completed,
               AVG(CASE WHEN success THEN 1.0 ELSE 0.0 END)
                   FILTER (WHERE status = 'completed' AND success IS NOT NULL) AS success_rate,
               {_sorted("avg", "cumulative_reward")} AS mean_reward,
               {_sorted("stddev_samp", "cumulative_reward")} AS std_reward,
               MIN(cumulative_reward) FILTER (WHERE status = 'completed') AS min_reward,
               MAX(cumulative_reward) FILTER (WHERE status = 'completed') AS max_reward,
               {_sorted("avg", "step_ms")} AS mean_step_ms
        FROM joined GROUP BY {groups} ORDER BY step NULLS LAST, checkpoint""")
    names = [d[0] for d in cur.description or []]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def _sorted(function: str, column: str) -> str:
    """`function` over the completed episodes' `column`, taken in sorted order: a float sum
    depends on the order of its terms, and the same episodes held in another order (a
    `join --follow` store and a batch store) gave means differing in the last bit."""
    return (f"list_aggregate(list_sort(list({column}) FILTER (WHERE status = 'completed')), "
            f"'{function}')")


def group_sql(spec: JoinSpec, result: JoinResult) -> tuple[str, str, str]:
    """SQL over `joined` of one checkpoint: its label, its GROUP BY columns, and the column
    of its training step (the aggregate's, and `join --follow`'s completion counts)."""
    g = q(result.group_column)
    label = f"CAST({g} AS VARCHAR)"
    groups = g
    if result.group_run:
        run = q(result.group_run)
        label = f"CAST({run} AS VARCHAR) || '/' || {label}"
        groups = f"{run}, {g}"
    return label, groups, q(result.step_column or TRAIN_PREFIX + spec.columns.step)


def write_table(con: duckdb.DuckDBPyConnection, name: str,
                sink: SinkURL | str | None = None) -> None:
    """Replace `store.<name>` with the joined rows (in PostgreSQL itself for a copied store)."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise JoinError(f"table name {name!r} must be a plain SQL identifier")
    if is_consumers_own(name):
        raise JoinError(f"refusing to overwrite {name!r}: it is one of the consumers' own "
                        "tables or views (in any letter case); choose another --table name, "
                        "e.g. episodes_training")
    target = None if sink is None else as_sink_url(sink)
    if target is not None and target.is_postgres and _store_is_a_copy(con):
        from rlmesh_stream.consumers.analysis.join_postgres import write_back

        write_back(con, target.url, name)
        return
    con.execute(f"CREATE OR REPLACE TABLE store.{q(name)} AS SELECT * FROM joined")


def _store_is_a_copy(con: duckdb.DuckDBPyConnection) -> bool:
    """True when `store` is the in-memory copy of a PostgreSQL store, not the store itself."""
    return scalar(con, "SELECT path IS NULL AND type = 'duckdb' FROM duckdb_databases() "
                       "WHERE database_name = 'store'") is True


def export(con: duckdb.DuckDBPyConnection, path: Path) -> None:
    """COPY the joined rows to CSV or Parquet, chosen by the file suffix."""
    suffix = path.suffix.lower()
    if suffix == ".csv":
        fmt = "FORMAT csv, HEADER true"
    elif suffix in (".parquet", ".pq"):
        fmt = "FORMAT parquet"
    else:
        raise JoinError(f"cannot export to {path.name}: use a .csv or .parquet file")
    con.execute(f"COPY (SELECT * FROM joined ORDER BY session_id, episode_record_id) "
                f"TO '{sql_str(str(path))}' ({fmt})")

"""`join` on a PostgreSQL store gives what it gives on DuckDB, and writes its table there.

The episodes are the consumers' own `episodes` table (created by the PostgreSQL sink's
migration) holding the rows of test_join.py's timeline; without DuckDB's `postgres`
extension (not installed here) the join copies them into DuckDB first.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from rlmesh_stream.consumers.analysis.join import JoinSpec, aggregate, connect, run_join
from rlmesh_stream.consumers.analysis.join_cli import join
from rlmesh_stream.consumers.sinks import open_sink
from tests.analysis.analysis_stores import at, episode, episodes_store
from tests.analysis.test_join import LOG, joined, timeline_episodes, write_log

pytestmark = pytest.mark.postgres


def fill_postgres(url: str, rows: list[dict[str, Any]]) -> str:
    open_sink(url).close()  # the consumers' own migration creates the tables
    with psycopg.connect(url, autocommit=True) as con:
        for row in rows:
            values = {k: json.dumps(v) if k == "final_info" and v is not None else v
                      for k, v in row.items()}
            cols = ", ".join(f'"{c}"' for c in values)
            con.execute(f"INSERT INTO episodes ({cols}) VALUES "  # type: ignore[call-overload]
                        f"({', '.join('%s' for _ in values)})", list(values.values()))
    return url


def aggregates(sink: str, spec: JoinSpec) -> list[dict[str, Any]]:
    con = connect(sink)
    try:
        return aggregate(con, spec, run_join(con, spec))
    finally:
        con.close()


@pytest.mark.parametrize("mode", ["asof", "key"])
def test_the_join_pairs_episodes_as_on_duckdb(mode: str, postgres_dsn: str,
                                             tmp_path: Path) -> None:
    rows = timeline_episodes() if mode == "asof" else [
        episode("s", i, model_component_id=f"c{100 * i}") for i in (1, 2, 3)]
    log = write_log(tmp_path / "log.jsonl", LOG)
    spec = JoinSpec(mode, log)  # type: ignore[arg-type]
    on_duckdb, _ = joined(episodes_store(tmp_path, rows), spec)
    on_postgres, result = joined(fill_postgres(postgres_dsn, rows), spec)
    assert on_postgres == on_duckdb
    assert result.matched == len(rows)


def test_the_aggregate_per_checkpoint_is_the_same_as_on_duckdb(postgres_dsn: str,
                                                              tmp_path: Path) -> None:
    rows = [*timeline_episodes(success=True), episode("s", 7, status="abandoned")]
    spec = JoinSpec("asof", write_log(tmp_path / "log.jsonl", LOG))
    assert (aggregates(fill_postgres(postgres_dsn, rows), spec)
            == aggregates(episodes_store(tmp_path, rows), spec))


def test_the_joined_table_is_written_into_postgresql(postgres_dsn: str, tmp_path: Path) -> None:
    fill_postgres(postgres_dsn, timeline_episodes())
    log = write_log(tmp_path / "log.jsonl", LOG)
    result = CliRunner().invoke(join, ["--sink", postgres_dsn, "--log", str(log), "--by", "asof",
                                       "--table", "eval_vs_training"])
    assert result.exit_code == 0, result.output
    with psycopg.connect(postgres_dsn) as con:
        got = con.execute("SELECT episode_record_id, train_checkpoint, train_loss "
                          "FROM eval_vs_training ORDER BY 1").fetchall()
    assert got == [("ep-000001", "c100", 0.9), ("ep-000002", "c100", 0.9),
                   ("ep-000003", "c200", 0.5), ("ep-000004", "c300", 0.3)]


def test_text_nulls_empty_strings_and_json_survive_the_copy(postgres_dsn: str,
                                                           tmp_path: Path) -> None:
    rows = [episode("s", 1, started_at=at(10), env_component_id="",
                    final_info={"note": 'a "quoted", comma'}),
            episode("s", 2, started_at=at(10), env_component_id=None, final_info=None)]
    fill_postgres(postgres_dsn, rows)
    con = connect(postgres_dsn)
    try:
        run_join(con, JoinSpec("asof", write_log(tmp_path / "log.jsonl", LOG)))
        got = con.execute("SELECT env_component_id, final_info FROM joined "
                          "ORDER BY episode_record_id").fetchall()
    finally:
        con.close()
    assert got[0][0] == "" and json.loads(got[0][1]) == {"note": 'a "quoted", comma'}
    assert got[1] == (None, None)


def test_a_replaced_joined_table_keeps_only_the_latest_rows(postgres_dsn: str,
                                                           tmp_path: Path) -> None:
    fill_postgres(postgres_dsn, timeline_episodes())
    log = write_log(tmp_path / "log.jsonl", LOG)
    args = ["--sink", postgres_dsn, "--log", str(log), "--by", "asof", "--table", "evals"]
    for _ in range(2):
        assert CliRunner().invoke(join, args).exit_code == 0
    with psycopg.connect(postgres_dsn) as con:
        assert con.execute("SELECT COUNT(*) FROM evals").fetchone() == (4,)


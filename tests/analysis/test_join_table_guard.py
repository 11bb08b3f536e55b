"""`join --table` never replaces a table or view the consumers own, in any letter case.

The names come from `rlmesh_stream.consumers.tables` itself, so a table added there is
protected without touching the join.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from rlmesh_stream.consumers.analysis.join_cli import join
from rlmesh_stream.consumers.tables import OWNED_NAMES, TABLES, VIEWS
from tests.analysis.analysis_stores import episodes_store
from tests.analysis.test_join import LOG, timeline_episodes, write_log


def _spellings(name: str) -> list[str]:
    return [name, name.upper(), name[0].upper() + name[1:]]


def test_every_consumer_table_and_view_is_owned() -> None:
    assert {t.name for t in TABLES} | {v.name for v in VIEWS} <= OWNED_NAMES


@pytest.mark.parametrize("name", [s for n in sorted(OWNED_NAMES) for s in _spellings(n)])
def test_join_refuses_a_consumer_owned_name(tmp_path: Path, name: str) -> None:
    sink = episodes_store(tmp_path, timeline_episodes())
    log = write_log(tmp_path / "log.jsonl", LOG)
    result = CliRunner().invoke(join, ["--sink", sink, "--log", str(log), "--by", "asof",
                                       "--table", name])
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines() == [
        f"Error: refusing to overwrite {name!r}: it is one of the consumers' own tables or "
        "views (in any letter case); choose another --table name, e.g. episodes_training"]


def test_a_refused_table_name_leaves_the_episodes_as_they_were(tmp_path: Path) -> None:
    sink = episodes_store(tmp_path, timeline_episodes())
    log = write_log(tmp_path / "log.jsonl", LOG)
    CliRunner().invoke(join, ["--sink", sink, "--log", str(log), "--by", "asof",
                              "--table", "Episodes"])
    con = duckdb.connect(sink.removeprefix("duckdb://"), read_only=True)
    try:
        assert con.execute("SELECT COUNT(*) FROM episodes").fetchone() == (4,)
        assert "train_step" not in {r[0] for r in con.execute("DESCRIBE episodes").fetchall()}
    finally:
        con.close()


@pytest.mark.postgres
@pytest.mark.parametrize("name", ["Episodes", "CONSUMER_OFFSETS", "delivery_producers"])
def test_join_refuses_a_consumer_owned_name_on_postgresql(postgres_dsn: str, tmp_path: Path,
                                                          name: str) -> None:
    from tests.analysis.test_join_postgres import fill_postgres

    sink = fill_postgres(postgres_dsn, timeline_episodes())
    log = write_log(tmp_path / "log.jsonl", LOG)
    result = CliRunner().invoke(join, ["--sink", sink, "--log", str(log), "--by", "asof",
                                       "--table", name])
    assert result.exit_code == 1
    assert f"refusing to overwrite {name!r}" in result.stderr

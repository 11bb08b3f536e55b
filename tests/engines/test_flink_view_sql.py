"""The Flink views are generated from the table definitions (no Flink needed here): every
merge rule has its aggregate, a column added to a definition reaches the view, and what
Flink cannot compute is refused by name rather than rendered wrong."""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from rlmesh_stream.consumers.builders.projection import Call, Const
from rlmesh_stream.consumers.flink import VIEW_NAMES, flink_views
from rlmesh_stream.consumers.flink.render import (
    Partial,
    aggregate_sql,
    partial_sql,
    table_view,
    view_columns,
)
from rlmesh_stream.consumers.flink.sessions import SESSION_PARTIALS
from rlmesh_stream.consumers.flink.sink import insert_sql, jdbc_sink_sql, postgres_table_sql
from rlmesh_stream.consumers.flink.telemetry import rollups_view
from rlmesh_stream.consumers.records import meta_json
from rlmesh_stream.consumers.tables import SESSIONS, TABLES_BY_NAME, Column, Merge
from rlmesh_stream.schemas.cli import schemas
from rlmesh_stream.schemas.topics import EventType


@pytest.mark.parametrize("name", [n for n in VIEW_NAMES if n in TABLES_BY_NAME])
def test_every_column_of_the_table_is_in_its_view_but_json(name: str) -> None:
    table, view = TABLES_BY_NAME[name], flink_views()[name]
    assert [c.name for c in view.columns] == \
        [c.name for c in table.columns if c.type != "JSON"]
    assert view.primary_key == table.primary_key


@pytest.mark.parametrize("merge", [m for m in Merge if m is not Merge.DERIVED])
def test_every_merge_rule_has_a_flink_aggregate(merge: Merge) -> None:
    column = Column("x", "BIGINT", merge, ranks=("a", "b"), follows="status")
    table = replace(SESSIONS, columns=(*SESSIONS.columns, column))
    assert aggregate_sql(table, table.column_by_name["x"])


def test_a_column_added_to_a_definition_reaches_the_view() -> None:
    table = replace(SESSIONS, columns=(*SESSIONS.columns, Column("peak", "DOUBLE", Merge.MAX)))
    partials = (Partial(EventType.SESSION_ENDED, {**SESSION_PARTIALS[3].columns,
                                                  "peak": Const(1.5)}),)
    sql = table_view(table, partials).query
    assert "MAX(`peak`) AS `peak`" in sql
    assert "CAST(1.5 AS DOUBLE) AS `peak`" in sql


def test_a_derived_column_is_computed_from_the_merged_ones() -> None:
    sql = flink_views()["telemetry_rollups"].query
    assert re.search(r"CAST\(CAST\(`avg_total` AS DOUBLE PRECISION\) / NULLIF\(`count`, 0\) "
                     r"AS DOUBLE\) AS `avg`", sql)


def test_a_python_conversion_has_no_flink_expression() -> None:
    partial = Partial(EventType.EPISODE_COMPLETED, {"session_id": Call(meta_json, "final_info")})
    with pytest.raises(ValueError, match="no Flink expression"):
        partial_sql(SESSIONS, partial)


def test_a_source_naming_no_field_of_the_event_is_refused() -> None:
    partial = Partial(EventType.SESSION_STARTED, {"reason": "no_such_field"})
    with pytest.raises(ValueError, match="session_started has no field 'no_such_field'"):
        partial_sql(SESSIONS, partial)


def test_a_json_column_is_left_out_and_named_in_the_header() -> None:
    view = flink_views()["episodes"]
    assert "final_info" not in {c.name for c in view.columns}
    assert "-- differs: left out: final_info" in view.create_sql()
    assert [c.name for c in view_columns(TABLES_BY_NAME["episodes"])] == \
        [c.name for c in view.columns]


def test_a_rollup_window_must_be_whole_milliseconds() -> None:
    assert "60000" in rollups_view(timedelta(minutes=1)).query
    with pytest.raises(ValueError, match="whole milliseconds"):
        rollups_view(timedelta(microseconds=1500))


def test_the_postgres_sink_table_is_the_consumers_definition_less_json() -> None:
    ddl = postgres_table_sql(flink_views()["episodes"])
    assert ddl.startswith("CREATE TABLE IF NOT EXISTS episodes (")
    assert "PRIMARY KEY (session_id, episode_record_id)" in ddl
    assert "final_info" not in ddl


def test_a_jdbc_sink_upserts_by_the_view_key() -> None:
    sql = jdbc_sink_sql(flink_views()["delivery_producers"], "jdbc:postgresql://db/rl")
    assert "PRIMARY KEY (`producer_id`) NOT ENFORCED" in sql
    assert "'connector' = 'jdbc'" in sql and "'table-name' = 'delivery_producers'" in sql


def test_a_jdbc_sink_takes_username_and_password_together() -> None:
    with pytest.raises(ValueError, match="together"):
        jdbc_sink_sql(flink_views()["sessions"], "jdbc:postgresql://db/rl", username="rl")


def test_schemas_sql_writes_the_postgres_sinks_when_given_a_jdbc_url(tmp_path: Path) -> None:
    url = "jdbc:postgresql://db:5432/rl"
    result = CliRunner().invoke(schemas, ["sql", "--engine", "flink", "--jdbc-url", url,
                                          "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    tables = (tmp_path / "postgres_tables.sql").read_text()
    sinks = (tmp_path / "sinks.sql").read_text()
    for view in flink_views().values():
        assert postgres_table_sql(view) in tables
        assert f"{insert_sql(view)};" in sinks
    assert f"'url' = '{url}'" in sinks and "EXECUTE STATEMENT SET" in sinks
    assert "password" not in sinks


def test_schemas_sql_refuses_a_jdbc_url_for_spark() -> None:
    result = CliRunner().invoke(schemas, ["sql", "--engine", "spark", "--jdbc-url", "jdbc:x"])
    assert result.exit_code == 2
    assert "--jdbc-url writes Flink sinks: it needs --engine flink" in result.output
    assert "Traceback" not in result.output

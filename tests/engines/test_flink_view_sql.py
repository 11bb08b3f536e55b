"""The Flink views are generated from the table definitions (no Flink needed here): every
merge rule has its aggregate, a column added to a definition reaches the view, and what
Flink cannot compute is refused by name rather than rendered wrong."""

from __future__ import annotations

import decimal
import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given, reject, settings
from hypothesis import strategies as st

from rlmesh_stream.consumers.builders import (
    AdvisoriesBuilder,
    Builder,
    SessionsBuilder,
    TelemetryBuilder,
)
from rlmesh_stream.consumers.builders.projection import TIMESTAMP, Call, Const
from rlmesh_stream.consumers.flink import VIEW_NAMES, flink_views
from rlmesh_stream.consumers.flink.render import (
    EnumText,
    Partial,
    Sql,
    aggregate_sql,
    partial_sql,
    table_view,
    view_columns,
)
from rlmesh_stream.consumers.flink.sessions import ADVISORY_PARTIALS, SESSION_PARTIALS
from rlmesh_stream.consumers.flink.sink import insert_sql, jdbc_sink_sql, postgres_table_sql
from rlmesh_stream.consumers.flink.telemetry import SESSION_PARTIALS as TELEMETRY_SESSION_PARTIALS
from rlmesh_stream.consumers.flink.telemetry import rollup_partials, rollups_view
from rlmesh_stream.consumers.runtime.records import Record, enum_text, meta_json
from rlmesh_stream.consumers.table_model import Column, Merge, Table
from rlmesh_stream.consumers.tables import (
    ADVISORIES,
    SESSIONS,
    TABLES_BY_NAME,
    TELEMETRY_ROLLUPS,
    TELEMETRY_SESSIONS,
)
from rlmesh_stream.infra.schemas_cli import schemas
from rlmesh_stream.schemas.contract.topics import EventType
from tests.contract_samples.strategies import events, exact


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
    with pytest.raises(ValueError, match="positive whole number of milliseconds"):
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


_SKIP = object()  # a Flink expression (Sql): checked by the engine tests, not here


def _evaluate(source: Any, event: Any, item: Any, timestamp: datetime) -> Any:
    """A declared source, computed in Python over a decoded event (and an array item)."""
    if isinstance(source, Sql):
        return _SKIP
    if source is TIMESTAMP:
        return timestamp
    if isinstance(source, Const):
        return source.value
    path = source.path if isinstance(source, EnumText) else source
    parts = path.split(".")
    value = item if parts[0] == "item" else event
    for part in parts[1:] if parts[0] == "item" else parts:
        value = None if value is None else getattr(value, part)
    return enum_text(value) if isinstance(source, EnumText) else value


def _declared_rows(partial: Partial, event: Any, timestamp: datetime) -> list[dict[str, Any]]:
    items = _evaluate(partial.unnest, event, None, timestamp) if partial.unnest else [None]
    rows = []
    for item in items:
        row = {c: _evaluate(s, event, item, timestamp) for c, s in partial.columns.items()}
        rows.append({c: v for c, v in row.items() if v is not _SKIP})
    return rows


_DECLARED = [(SessionsBuilder(), SESSIONS, p) for p in SESSION_PARTIALS] + \
    [(AdvisoriesBuilder(), ADVISORIES, p) for p in ADVISORY_PARTIALS] + \
    [(TelemetryBuilder(), TELEMETRY_ROLLUPS, p) for p in rollup_partials()] + \
    [(TelemetryBuilder(), TELEMETRY_SESSIONS, p) for p in TELEMETRY_SESSION_PARTIALS]


@pytest.mark.parametrize(("builder", "table", "partial"), _DECLARED,
                         ids=[f"{t.name}-{p.event_type.value}" for _, t, p in _DECLARED])
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_the_declared_partial_rows_are_the_builders_rows(builder: Builder, table: Table,
                                                         partial: Partial, data: Any) -> None:
    """The sources a view declares for a builder written by hand (every column but the
    Flink expressions) give the rows the builder gives, so the two cannot drift apart."""
    event = data.draw(events(partial.event_type))
    timestamp = datetime(2026, 1, 1, tzinfo=UTC)
    record = Record("t", 0, 0, timestamp, partial.event_type, event)
    try:
        built = [row for t, row in builder.rows(record) if t is table]
    except decimal.InvalidOperation:
        # A known defect of the telemetry builder, not of the view: `weighted` quantizes
        # count * value in Python's default 28-digit context, which raises for a product
        # of 1e19 or more (reported with this work); such an event is left out here.
        reject()
    if not built:  # the builder writes this event to another table (a snapshot's horizon)
        return
    declared = _declared_rows(partial, event, timestamp)
    assert len(declared) == len(built)
    for want, got in zip(built, declared, strict=True):
        assert exact(got) == exact({c: want.get(c) for c in got})
        assert set(want) <= set(partial.columns), "a column the builder fills is not declared"


def test_schemas_sql_writes_the_rollups_of_the_window_asked_for(tmp_path: Path) -> None:
    result = CliRunner().invoke(schemas, ["sql", "--engine", "flink", "--window", "2.5",
                                          "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    view = (tmp_path / "telemetry_rollups_view.sql").read_text()
    assert "MOD(" in view and ", 2500))" in view and "60000" not in view


def test_schemas_sql_names_a_window_the_views_cannot_compute() -> None:
    result = CliRunner().invoke(schemas, ["sql", "--engine", "flink", "--window", "0.0005"])
    assert result.exit_code == 2
    assert "Invalid value for --window: the telemetry window must be a positive whole " \
        "number of milliseconds, got 0.0005 s" in result.output
    assert "Traceback" not in result.output

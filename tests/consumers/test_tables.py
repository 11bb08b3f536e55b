"""The table contract: merges are order-independent, and the sinks create and migrate tables."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

import duckdb
import pytest

from consumers.builders import Reduced
from consumers.builders.telemetry import weighted
from consumers.sinks import OffsetConflict, OffsetUpdate, SinkBatch, open_sink
from consumers.tables import (
    ADVISORIES,
    SESSIONS,
    TABLES,
    TELEMETRY_ROLLUPS,
    Column,
    Dialect,
    Merge,
    Table,
    create_table_sql,
    finish_row,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _partial(table: Table, **values: Any) -> dict[str, Any]:
    return finish_row(table, {c: values.get(c) for c in table.column_names})


SESSION_PARTIALS = [
    _partial(SESSIONS, session_id="s", env_id="e", status="running", env_connected_at=T0),
    _partial(SESSIONS, session_id="s", env_id="e", status="running", started_at=T0),
    _partial(SESSIONS, session_id="s", env_id="e", status="ended", reason="done",
             total_steps=10, total_episodes=2, ended_at=T0 + timedelta(seconds=5)),
    _partial(SESSIONS, session_id="s", env_id="e", status="failed", reason="crash",
             ended_at=T0 + timedelta(seconds=4)),
]


def _apply_each(url: str, table: Table, rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """Apply rows one batch each (the SQL merge), return the table's rows."""
    sink = open_sink(url)
    try:
        for row in rows:
            sink.apply(SinkBatch(rows={table: [row]}))
        return sink.query(f"SELECT {', '.join(table.column_names)} FROM {table.name} "
                          f"ORDER BY {', '.join(table.primary_key)}")
    finally:
        sink.close()


def test_every_order_of_partial_rows_merges_to_the_same_row_in_python() -> None:
    results = set()
    for order in itertools.permutations(SESSION_PARTIALS):
        reduced = Reduced()
        for row in order:
            reduced.add(SESSIONS, dict(row))
        results.add(tuple(reduced.sorted_rows(SESSIONS)[0].items()))
    assert len(results) == 1
    row = dict(results.pop())
    assert (row["status"], row["reason"], row["ended_at"]) == (
        "failed", "crash", T0 + timedelta(seconds=4))


def test_sql_merge_in_any_order_equals_the_python_merge(sink_url: str) -> None:
    reduced = Reduced()
    for row in SESSION_PARTIALS:
        reduced.add(SESSIONS, dict(row))
    expected = tuple(reduced.sorted_rows(SESSIONS)[0].values())[1:]
    rows = []
    for i, order in enumerate(itertools.permutations(SESSION_PARTIALS)):  # one session each
        rows.extend({**r, "session_id": f"s{i:02d}"} for r in order)
    stored = _apply_each(sink_url, SESSIONS, rows)
    assert len(stored) == 24
    assert {row[1:] for row in stored} == {expected}


def test_advisory_counts_add_and_first_last_seen_span_the_records(sink_url: str) -> None:
    rows = [_partial(ADVISORIES, session_id="s", leg="observation", severity="caution",
                     message="m", count=1, first_seen=T0 + timedelta(seconds=i),
                     last_seen=T0 + timedelta(seconds=i)) for i in (3, 1, 2)]
    _apply_each(sink_url, ADVISORIES, rows)
    sink = open_sink(sink_url)
    assert sink.query("SELECT count, first_seen, last_seen FROM advisories") == [
        (3, T0 + timedelta(seconds=1), T0 + timedelta(seconds=3))]


def test_rollup_average_is_count_weighted_across_batches(sink_url: str) -> None:
    def window_row(count: int, avg: float, p99: float) -> dict[str, Any]:
        return _partial(TELEMETRY_ROLLUPS, window_start=T0, env_id="e", model_component_id="m",
                        lane_key=-1, op="env.step", component="env", metric="rpc.total",
                        count=count, row_count=1, avg_total=weighted(count, avg),
                        p50_total=weighted(count, avg), p95_total=weighted(count, p99),
                        p99_total=weighted(count, p99),
                        max_p99=p99)

    _apply_each(sink_url, TELEMETRY_ROLLUPS,
                [window_row(1, 10.0, 12.0), window_row(3, 2.0, 40.0)])
    sink = open_sink(sink_url)
    assert sink.query("SELECT count, row_count, avg, p99, max_p99 FROM telemetry_rollups") == [
        (4, 2, 4.0, 33.0, 40.0)]


def test_a_table_missing_a_column_gets_it_on_open(tmp_path: Any) -> None:
    path = tmp_path / "old.duckdb"
    old = Table(SESSIONS.name, tuple(c for c in SESSIONS.columns if c.name != "reason"),
                SESSIONS.primary_key)
    con = duckdb.connect(str(path))
    con.execute(create_table_sql(old, Dialect.DUCKDB))
    con.close()
    sink = open_sink(f"duckdb://{path}")
    columns = {r[0] for r in sink.query(
        "SELECT column_name FROM information_schema.columns WHERE table_name = 'sessions'")}
    assert columns == set(SESSIONS.column_names)


def test_opening_a_sink_creates_every_table(sink_url: str) -> None:
    sink = open_sink(sink_url)
    names = {r[0] for r in sink.query("SELECT table_name FROM information_schema.tables")}
    assert {t.name for t in TABLES} | {"delivery_producers"} <= names


def test_an_offset_update_from_a_stale_position_is_refused_with_its_rows(sink_url: str) -> None:
    sink = open_sink(sink_url)
    row = _partial(SESSIONS, session_id="s", status="running")
    sink.apply(SinkBatch(rows={SESSIONS: [row]},
                         offsets=[OffsetUpdate("sessions", "t", 0, None, 10)]))
    stale = SinkBatch(rows={SESSIONS: [_partial(SESSIONS, session_id="s2", status="running")]},
                      offsets=[OffsetUpdate("sessions", "t", 0, 5, 12)])
    with pytest.raises(OffsetConflict):
        sink.apply(stale)
    assert sink.query("SELECT session_id FROM sessions") == [("s",)]
    assert sink.load_offsets("sessions") == {("t", 0): 10}


def test_rank_merge_prefers_the_higher_status_whatever_comes_first() -> None:
    status = Column("status", "TEXT", Merge.RANK, ranks=("running", "ended", "failed"))
    from consumers.tables import merge_value

    assert merge_value(status, "failed", "running") == "failed"
    assert merge_value(status, "running", "ended") == "ended"
    assert merge_value(status, None, "running") == "running"

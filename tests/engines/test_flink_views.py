"""Every consumer table's Flink view, over the same fleet, equals the table the consumers
build, value for value: in a bounded batch job (`flink_rows`, shared with the other engine
tests) and in a streaming job (an updating result) upserted into PostgreSQL through
Flink's JDBC connector. The fleet has failed sessions (abandoned episodes), caution
advisories, lane-driven sessions and a producer with a duplicate and a missing sequence.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pytest

from rlmesh_stream.consumers.builders import make_builders
from rlmesh_stream.consumers.flink import VIEW_NAMES, flink_views
from rlmesh_stream.consumers.flink.render import FlinkView
from rlmesh_stream.consumers.flink.sink import insert_sql, jdbc_sink_sql, postgres_table_sql
from rlmesh_stream.consumers.runtime import ConsumerRuntime, RuntimeOptions
from rlmesh_stream.consumers.sinks import open_sink
from rlmesh_stream.consumers.tables import TABLES_BY_NAME, VIEWS
from rlmesh_stream.infra.flink import FlinkArtifacts, run_sql
from rlmesh_stream.schemas.connection.config import StreamConfig
from rlmesh_stream.schemas.engines.flink import FlinkOptions, create_tables
from tests.engines.engine_values import flink_timestamp_ms

pytestmark = [pytest.mark.stack, pytest.mark.slow]

Rows = dict[tuple[Any, ...], dict[str, Any]]


def _value(column_type: str, value: Any) -> Any:
    """One engine's value in one form: timestamps as epoch ms, decimals as Decimal."""
    if value is None:
        return None
    if column_type == "TIMESTAMPTZ":
        return flink_timestamp_ms(value) if isinstance(value, str) else \
            round(value.timestamp() * 1000)
    if column_type == "DECIMAL":
        return Decimal(value)
    if isinstance(value, datetime):
        raise AssertionError(f"a datetime in a {column_type} column")
    return value


def _keyed(view: FlinkView, rows: list[dict[str, Any]]) -> Rows:
    types = {c.name: c.type for c in view.columns}
    out: Rows = {}
    for row in rows:
        row = {name: _value(types[name], row[name]) for name in types}
        key = tuple(row[k] for k in view.primary_key)
        assert key not in out, f"{view.name}: two rows of key {key}"
        out[key] = row
    return out


@pytest.fixture(scope="module")
def views() -> dict[str, FlinkView]:
    return flink_views()


@pytest.fixture(scope="module")
def consumer_rows(fleet_config: StreamConfig, views: dict[str, FlinkView],
                  tmp_path_factory: pytest.TempPathFactory) -> dict[str, Rows]:
    """Every table (and `delivery_producers`) as every builder builds it from the fleet."""
    path = tmp_path_factory.mktemp("consumers") / "tables.duckdb"
    sink = open_sink(f"duckdb://{path}")
    try:
        ConsumerRuntime(fleet_config, make_builders(["all"]), sink,
                        RuntimeOptions(group_id=f"g-{uuid.uuid4().hex[:8]}",
                                       from_beginning=True, until_end=True)).run()
        out = {}
        for name, view in views.items():
            names = [c.name for c in view.columns]
            rows = sink.query(f"SELECT {', '.join(names)} FROM {name}")
            out[name] = _keyed(view, [dict(zip(names, r, strict=True)) for r in rows])
    finally:
        sink.close()
    return out


@pytest.fixture(scope="module")
def streamed_rows(fleet_config: StreamConfig, views: dict[str, FlinkView], postgres: str,
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Rows]]:
    """Every view run as one streaming job, upserted into PostgreSQL tables by Flink's
    JDBC connector (`consumers/flink/sink.py`), read back when the job has finished (its
    topic tables are bounded, so it ends at the end offsets it saw when it started). The
    test server trusts local connections: the password is not checked."""
    database = f"flink_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(postgres, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {database}")
    base, _, _ = postgres.rpartition("/")
    dsn = f"{base}/{database}"
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            for view in views.values():
                conn.execute(postgres_table_sql(view))
        jdbc = "jdbc:postgresql://" + dsn.split("@", 1)[1]
        flink = FlinkArtifacts.from_env()
        flink.ensure()
        options = FlinkOptions(fleet_config.bootstrap, fleet_config.registry_url,
                               fleet_config.topic_prefix, bounded=True)
        statements = [*create_tables(options).values(),
                      *(v.create_sql() for v in views.values()),
                      *(jdbc_sink_sql(v, jdbc, "postgres", "trusted") for v in views.values())]
        run_sql(flink, [s.rstrip().rstrip(";") for s in statements], {},
                Path(tmp_path_factory.mktemp("flink-streaming")), streaming=True,
                inserts=[insert_sql(v) for v in views.values()])
        out = {}
        with psycopg.connect(dsn) as conn:
            for name, view in views.items():
                names = [c.name for c in view.columns]
                rows = conn.execute(f"SELECT {', '.join(names)} FROM {name}").fetchall()
                out[name] = _keyed(view, [dict(zip(names, r, strict=True)) for r in rows])
        yield out
    finally:
        with psycopg.connect(postgres, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")


def test_every_consumer_table_has_a_view_named_as_it() -> None:
    mirrored = {"episodes", "sessions", "advisories", "telemetry_rollups",
                "telemetry_sessions"}
    assert mirrored <= set(TABLES_BY_NAME)
    assert "delivery_producers" in {v.name for v in VIEWS}
    assert set(VIEW_NAMES) == mirrored | {"delivery_producers"}
    assert list(flink_views()) == list(VIEW_NAMES)


@pytest.mark.parametrize("name", VIEW_NAMES)
def test_the_bounded_view_equals_the_consumers_table(name: str, views: dict[str, FlinkView],
                                                     flink_rows: Any,
                                                     consumer_rows: dict[str, Rows]) -> None:
    ours = consumer_rows[name]
    assert ours, f"the fleet gave no {name} rows"
    flink = _keyed(views[name], flink_rows[f"view_{name}"])
    assert sorted(flink, key=repr) == sorted(ours, key=repr)
    for key, row in ours.items():
        assert flink[key] == row, (name, key)


@pytest.mark.parametrize("name", VIEW_NAMES)
def test_the_streaming_view_reaches_the_consumers_table(
        name: str, streamed_rows: dict[str, Rows], consumer_rows: dict[str, Rows]) -> None:
    ours = consumer_rows[name]
    streamed = streamed_rows[name]
    assert sorted(streamed, key=repr) == sorted(ours, key=repr)
    for key, row in ours.items():
        assert streamed[key] == row, (name, key)


def test_the_fleet_has_what_the_views_must_get_right(consumer_rows: dict[str, Rows]) -> None:
    sessions = consumer_rows["sessions"].values()
    assert {"failed", "ended"} <= {r["status"] for r in sessions}
    assert any(r["lane"] is not None for r in sessions), "no lane-driven session"
    assert "abandoned" in {r["status"] for r in consumer_rows["episodes"].values()}
    assert "caution" in {r["severity"] for r in consumer_rows["advisories"].values()}
    assert {r["kind"] for r in consumer_rows["telemetry_rollups"].values()} >= {"Duration"}
    assert consumer_rows["telemetry_sessions"]


def test_the_delivery_view_counts_the_forged_duplicates_and_gaps(
        consumer_rows: dict[str, Rows], flink_rows: Any, views: dict[str, FlinkView]) -> None:
    """forger: sequences 0 (three times: "0", "0", "-0"), 2 and 5 ("0005"); "x7" and one
    above MAX_SEQUENCE left out. forger-v1 (version-1 headers): 3 alone."""
    want = {("forger",): {"producer_id": "forger", "records": 5, "distinct_sequences": 3,
                          "min_seq": 0, "max_seq": 5, "gaps": 3, "duplicates": 2},
            ("forger-v1",): {"producer_id": "forger-v1", "records": 1,
                             "distinct_sequences": 1, "min_seq": 3, "max_seq": 3, "gaps": 3,
                             "duplicates": 0}}
    flink = _keyed(views["delivery_producers"], flink_rows["view_delivery_producers"])
    for rows in (consumer_rows["delivery_producers"], flink):
        assert {k: rows[k] for k in want} == want
        assert ("",) not in rows  # `rlmesh.ps` without a producer id: an invalid sequence
    honest = [r for k, r in consumer_rows["delivery_producers"].items() if k not in want]
    assert honest and all(r["gaps"] == 0 and r["duplicates"] == 0 for r in honest)


# What each view's header says Flink cannot say as the builder does (render.FlinkView).
DIFFERENCES = {
    "episodes": "left out: final_info (JSON: a MetaMap is recursive",
    "sessions": "reason, total_steps, total_episodes (FOLLOWS): among the rows of the "
                "highest status, the builder keeps the first non-NULL value it read, Flink "
                "the largest as text",
    "advisories": "env_id, env_component_id, model_component_id, lane (FIRST): the first "
                  "non-NULL value read, by each engine in its own order",
    "telemetry_rollups": "rounded to 1e-9 half up (the builder: half even)",
    "telemetry_sessions": "kind, count, avg, p50, p95, p99 (LAST): the last non-NULL value "
                          "read, by each engine in its own order",
    "delivery_producers": "a producer id that is not valid UTF-8",
}


@pytest.mark.parametrize("name", sorted(DIFFERENCES))
def test_the_view_header_names_how_it_differs(name: str, views: dict[str, FlinkView]) -> None:
    header = views[name].create_sql().split("CREATE TEMPORARY VIEW")[0]
    assert any(line.startswith("-- differs: ") and DIFFERENCES[name] in line
               for line in header.splitlines()), header

"""Flink 2.3 with Iceberg's Flink runtime (iceberg-flink-runtime-2.0:1.10.0) reads what
`export trajectories --format iceberg` wrote, through Iceberg's JDBC catalog over the same
SQLite file: the same episodes and step counts as pyiceberg's scan."""

from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path

import pytest

from rlmesh_stream.consumers.datasets.episodes import Filters
from rlmesh_stream.consumers.datasets.export import ExportOptions, run_export
from rlmesh_stream.consumers.runtime import RuntimeOptions
from rlmesh_stream.infra.flink import FlinkArtifacts, run_sql
from rlmesh_stream.schemas.connection.config import StreamConfig

pytest.importorskip("pyiceberg")
pytestmark = [pytest.mark.stack, pytest.mark.slow]
TABLE = "rl.fleet"


def test_flink_reads_the_exported_iceberg_tables(fleet_config: StreamConfig,
                                                 tmp_path: Path) -> None:
    from pyiceberg.catalog.sql import SqlCatalog

    from rlmesh_stream.consumers.datasets.iceberg import IcebergTarget

    catalog = tmp_path / "catalog.db"
    group = f"g-{uuid.uuid4().hex[:8]}"
    run_export(fleet_config, ExportOptions(None, "iceberg", TABLE, Filters(),
                                           iceberg=IcebergTarget(f"sqlite:///{catalog}", TABLE),
                                           group=group),
               RuntimeOptions(group_id=group, from_beginning=True, until_end=True))
    warehouse = (tmp_path / "warehouse").as_uri()
    tables = SqlCatalog("rlmesh", uri=f"sqlite:///{catalog}", warehouse=warehouse)
    episodes = tables.load_table(f"{TABLE}_episodes").scan().to_arrow().to_pylist()
    steps = tables.load_table(f"{TABLE}_steps").scan().to_arrow().column("env_id").to_pylist()
    assert episodes
    flink = FlinkArtifacts.from_env()
    flink.ensure()  # a no-op when `rlmesh-stream infra fetch --flink` ran (.ci/run)

    read = run_sql(flink, [
        "CREATE CATALOG rlmesh WITH ('type' = 'iceberg', "
        "'catalog-impl' = 'org.apache.iceberg.jdbc.JdbcCatalog', "
        f"'uri' = 'jdbc:sqlite:{catalog}', 'jdbc.schema-version' = 'V1', "
        f"'warehouse' = '{warehouse}')"], {
        "episodes": f"SELECT session_id, episode_record_id, steps FROM rlmesh.{TABLE}_episodes",
        "steps": f"SELECT env_id, count(*) AS n FROM rlmesh.{TABLE}_steps GROUP BY env_id"},
        tmp_path / "flink", iceberg=True)

    assert sorted([r["session_id"], r["episode_record_id"], r["steps"]]
                  for r in read["episodes"]) == sorted(
        [e["session_id"], e["episode_record_id"], e["steps"]] for e in episodes)
    assert {r["env_id"]: r["n"] for r in read["steps"]} == dict(Counter(steps))

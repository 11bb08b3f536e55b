"""Flink 2.3 with Iceberg's Flink runtime (iceberg-flink-runtime-2.0:1.10.0) reads what
`export trajectories --format iceberg` wrote, through Iceberg's JDBC catalog over the same
SQLite file: the same episodes and step counts as pyiceberg's scan."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlmesh_stream.infra.flink import FlinkArtifacts, run_sql
from tests.engines.iceberg_export import IcebergExport

pytestmark = [pytest.mark.stack, pytest.mark.slow]


def test_flink_reads_the_exported_iceberg_tables(iceberg_export: IcebergExport,
                                                 tmp_path: Path) -> None:
    flink = FlinkArtifacts.from_env()
    flink.ensure()  # a no-op when `rlmesh-stream infra fetch --flink` ran (.ci/run)
    table = iceberg_export.table

    read = run_sql(flink, [
        "CREATE CATALOG rlmesh WITH ('type' = 'iceberg', "
        "'catalog-impl' = 'org.apache.iceberg.jdbc.JdbcCatalog', "
        f"'uri' = 'jdbc:sqlite:{iceberg_export.catalog}', 'jdbc.schema-version' = 'V1', "
        f"'warehouse' = '{iceberg_export.warehouse}')"], {
        "episodes": f"SELECT session_id, episode_record_id, steps FROM rlmesh.{table}_episodes",
        "steps": f"SELECT env_id, count(*) AS n FROM rlmesh.{table}_steps GROUP BY env_id"},
        tmp_path / "flink", iceberg=True)

    assert sorted([r["session_id"], r["episode_record_id"], r["steps"]]
                  for r in read["episodes"]) == iceberg_export.episodes
    assert {r["env_id"]: r["n"] for r in read["steps"]} == iceberg_export.steps

"""The Flink cache is complete only with every jar of `FLINK_JARS`, `ICEBERG_JARS` and
`HADOOP_JARS`: a cache fetched for an older list (before the JDBC connector, before
Iceberg's) is fetched again, not run without the new jars."""

from __future__ import annotations

from pathlib import Path

from rlmesh_stream.infra.artifacts import Artifacts
from rlmesh_stream.infra.flink import (
    FLINK_JARS,
    FLINK_VERSION,
    HADOOP_JARS,
    ICEBERG_JARS,
    FlinkArtifacts,
)


def _cache(tmp_path: Path, jars_marker: str) -> FlinkArtifacts:
    flink = FlinkArtifacts(Artifacts(cache_dir=tmp_path))
    flink.jars_dir.mkdir(parents=True)
    flink.venv.mkdir(parents=True)
    (flink.jars_dir / ".complete").write_text(jars_marker)
    (flink.venv / ".complete").write_text(FLINK_VERSION)
    return flink


def test_a_cache_of_an_older_jar_list_is_not_complete(tmp_path: Path) -> None:
    assert not _cache(tmp_path, FLINK_VERSION).is_cached()  # as written before the list


def test_a_cache_fetched_before_the_iceberg_jars_is_not_complete(tmp_path: Path) -> None:
    assert not _cache(tmp_path, "\n".join(FLINK_JARS)).is_cached()


def test_a_cache_of_this_jar_list_is_complete(tmp_path: Path) -> None:
    assert _cache(tmp_path, "\n".join(FLINK_JARS + ICEBERG_JARS + HADOOP_JARS)).is_cached()


def test_the_jars_include_the_jdbc_connector_and_the_postgres_driver() -> None:
    artifacts = {coordinate.rsplit(":", 1)[0] for coordinate in FLINK_JARS}
    assert {"org.apache.flink:flink-connector-jdbc-core",
            "org.apache.flink:flink-connector-jdbc-postgres",
            "org.postgresql:postgresql"} <= artifacts

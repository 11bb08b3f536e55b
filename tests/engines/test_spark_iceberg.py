"""Spark 4.0 with iceberg-spark-runtime-4.0_2.13:1.10.0 reads what `export trajectories
--format iceberg` wrote: the same episodes and step counts as pyiceberg's scan.

Needs a Python with PySpark 4.0 (`RLMESH_STREAM_SPARK_PYTHON`; .ci/run makes one) and
Maven Central for the jars; skipped otherwise."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from rlmesh_stream.consumers.datasets.episodes import Filters
from rlmesh_stream.consumers.datasets.export import ExportOptions, run_export
from rlmesh_stream.consumers.runtime import RuntimeOptions
from rlmesh_stream.schemas.connection.config import StreamConfig

pytest.importorskip("pyiceberg")
pytestmark = [pytest.mark.stack, pytest.mark.slow]
SPARK_PYTHON = os.environ.get("RLMESH_STREAM_SPARK_PYTHON")
TABLE = "rl.fleet"


@pytest.mark.skipif(not SPARK_PYTHON, reason="RLMESH_STREAM_SPARK_PYTHON (PySpark 4.0) unset")
def test_spark_reads_the_exported_iceberg_tables(fleet_config: StreamConfig,
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

    read = subprocess.run([str(SPARK_PYTHON), str(Path(__file__).with_name(
        "spark_iceberg_read.py")), str(catalog), warehouse, TABLE], capture_output=True,
        text=True, timeout=600)

    assert read.returncode == 0, read.stderr[-3000:]
    spark: dict[str, Any] = json.loads(read.stdout.strip().splitlines()[-1])
    assert spark["episodes"] == sorted(
        [e["session_id"], e["episode_record_id"], e["steps"]] for e in episodes)
    assert spark["steps"] == dict(Counter(steps))

"""Spark 4.0 with iceberg-spark-runtime-4.0_2.13:1.10.0 reads what `export trajectories
--format iceberg` wrote: the same episodes and step counts as pyiceberg's scan.

Needs a Python with PySpark 4.0 (`RLMESH_STREAM_SPARK_PYTHON`; .ci/run makes one) and
Maven Central for the jars; skipped otherwise."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.engines.iceberg_export import IcebergExport

pytest.importorskip("pyiceberg")
pytestmark = [pytest.mark.stack, pytest.mark.slow]
SPARK_PYTHON = os.environ.get("RLMESH_STREAM_SPARK_PYTHON")


@pytest.mark.skipif(not SPARK_PYTHON, reason="RLMESH_STREAM_SPARK_PYTHON (PySpark 4.0) unset")
def test_spark_reads_the_exported_iceberg_tables(iceberg_export: IcebergExport) -> None:
    read = subprocess.run([str(SPARK_PYTHON), str(Path(__file__).with_name(
        "spark_iceberg_read.py")), str(iceberg_export.catalog), iceberg_export.warehouse,
        iceberg_export.table], capture_output=True, text=True, timeout=600)

    assert read.returncode == 0, read.stderr[-3000:]
    spark: dict[str, Any] = json.loads(read.stdout.strip().splitlines()[-1])
    assert spark["episodes"] == iceberg_export.episodes
    assert spark["steps"] == iceberg_export.steps

"""The fleet exported into Iceberg tables (an SQLite catalog), and what pyiceberg reads of
them: what every other engine (Spark, Flink) must read too."""

from __future__ import annotations

import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlmesh_stream.schemas.connection.config import StreamConfig


@dataclass(frozen=True)
class IcebergExport:
    catalog: Path  # the catalog's SQLite file
    warehouse: str  # the warehouse's URI
    table: str  # NAMESPACE.NAME: the tables NAME_episodes and NAME_steps
    episodes: list[list[Any]]  # [session_id, episode_record_id, steps], sorted
    steps: dict[str, int]  # the steps table's rows per env_id


def export_to_iceberg(config: StreamConfig, tmp: Path, table: str = "rl.fleet"
                      ) -> IcebergExport:
    """`export trajectories --format iceberg` of `config`'s topics into `tmp`, read back."""
    from pyiceberg.catalog.sql import SqlCatalog

    from rlmesh_stream.consumers.datasets.episodes import Filters
    from rlmesh_stream.consumers.datasets.export import ExportOptions, run_export
    from rlmesh_stream.consumers.datasets.iceberg import IcebergTarget
    from rlmesh_stream.consumers.runtime import RuntimeOptions

    catalog, group = tmp / "catalog.db", f"g-{uuid.uuid4().hex[:8]}"
    run_export(config, ExportOptions(None, "iceberg", table, Filters(),
                                     iceberg=IcebergTarget(f"sqlite:///{catalog}", table),
                                     group=group),
               RuntimeOptions(group_id=group, from_beginning=True, until_end=True))
    warehouse = (tmp / "warehouse").as_uri()
    tables = SqlCatalog("rlmesh", uri=f"sqlite:///{catalog}", warehouse=warehouse)
    episodes = tables.load_table(f"{table}_episodes").scan().to_arrow().to_pylist()
    steps = tables.load_table(f"{table}_steps").scan().to_arrow().column("env_id").to_pylist()
    assert episodes
    return IcebergExport(catalog, warehouse, table, sorted(
        [e["session_id"], e["episode_record_id"], e["steps"]] for e in episodes),
        dict(Counter(steps)))

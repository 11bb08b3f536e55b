"""Other writers commit to the exported Iceberg tables (pyiceberg here: an empty append, a
compaction, a column or a partition field added, rows deleted), then the same export runs
again over more sessions. The export read its state from the head snapshot only: after
any such commit it started over at generation 0 and wrote every episode again, or lost
the steps of the new ones. It now reads the newest snapshot that carries its state, goes
on from there, and refuses in one line a change it cannot reconcile."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as pads
import pytest

from rlmesh_stream.consumers.datasets.episodes import Filters
from rlmesh_stream.consumers.datasets.export import ExportOptions, run_export
from rlmesh_stream.consumers.datasets.iceberg import IcebergTarget
from rlmesh_stream.consumers.runtime import RuntimeOptions
from rlmesh_stream.infra.topics import ensure_topics
from rlmesh_stream.producer.hooks import KafkaRuntimeHooks
from rlmesh_stream.producer.simulator import simulate_fleet
from rlmesh_stream.schemas.connection.config import StreamConfig
from tests.datasets.test_export_iceberg import TABLE, _cli
from tests.publishing import close_delivered
from tests.record_copies import new_prefix

pytest.importorskip("pyiceberg")
pytestmark = [pytest.mark.stack, pytest.mark.slow]
KEYS = {"episodes": ["session_id", "episode_record_id"],
        "steps": ["session_id", "episode_record_id", "step"]}


def _publish(config: StreamConfig, seed: int) -> None:
    hooks = KafkaRuntimeHooks(config=config, install_exit_handlers=False)
    simulate_fleet(hooks, sessions=6, lanes=2, episodes=3, seed=seed, failure_rate=0.0)
    close_delivered(hooks)


def _catalog(catalog: Path) -> Any:
    from pyiceberg.catalog.sql import SqlCatalog

    return SqlCatalog("rlmesh", uri=f"sqlite:///{catalog}", init_catalog_tables="false",
                      warehouse=(catalog.parent / "warehouse").as_uri())


def _export_iceberg(config: StreamConfig, catalog: Path, group: str) -> Any:
    sink, _ = run_export(config, ExportOptions(None, "iceberg", TABLE, Filters(),
                                               iceberg=IcebergTarget(f"sqlite:///{catalog}",
                                                                     TABLE), group=group),
                         RuntimeOptions(group_id=group, from_beginning=True, until_end=True))
    return sink


def _rows(table: Any, kind: str, columns: list[str]) -> list[dict[str, Any]]:
    return table.select(columns).sort_by([(k, "ascending") for k in KEYS[kind]]).to_pylist()


def _assert_clean(config: StreamConfig, catalog: Path, tmp_path: Path, sink: Any) -> None:
    """The tables hold a clean Parquet export's rows of every session, each once, and the
    certificate counts them."""
    clean = tmp_path / "clean"
    run_export(config, ExportOptions(clean, "parquet", "rlmesh/x-v0", Filters()),
               RuntimeOptions(group_id=f"g-{uuid.uuid4().hex[:8]}", from_beginning=True,
                              until_end=True))
    cat = _catalog(catalog)
    for kind in ("episodes", "steps"):
        # `caution` left out: an episode released before its session's caution advisory
        # is read is written untagged (the certificate counts those), in either export
        want = pads.dataset(clean / kind, partitioning="hive").to_table().drop_columns(
            ["env", *(["caution"] if kind == "episodes" else [])])
        got = cat.load_table(f"{TABLE}_{kind}").scan().to_arrow()
        keys = [tuple(r.values()) for r in got.select(KEYS[kind]).to_pylist()]
        assert len(keys) == len(set(keys)), f"{kind} rows written twice"
        assert _rows(got, kind, want.column_names) == _rows(want, kind, want.column_names), kind
        count = "episodes_exported" if kind == "episodes" else "steps_exported"
        assert sink.certificate_summary()[count] == got.num_rows, kind


@pytest.fixture
def exported(stack: Any, tmp_path: Path) -> tuple[StreamConfig, Path, str]:
    """A fleet exported into Iceberg tables (one run), and the run's group."""
    config = new_prefix(stack)
    ensure_topics(config, partitions=3)
    _publish(config, seed=1)
    catalog, group = tmp_path / "catalog.db", f"g-{uuid.uuid4().hex[:8]}"
    _export_iceberg(config, catalog, group)
    return config, catalog, group


def _again_with_more(exported: tuple[StreamConfig, Path, str], tmp_path: Path,
                     foreign: Callable[[Any, Any], None]) -> None:
    """`foreign(episodes table, steps table)`, then more sessions and the export again."""
    config, catalog, group = exported
    cat = _catalog(catalog)
    foreign(cat.load_table(f"{TABLE}_episodes"), cat.load_table(f"{TABLE}_steps"))
    _publish(config, seed=2)

    sink = _export_iceberg(config, catalog, group)

    _assert_clean(config, catalog, tmp_path, sink)


def test_an_empty_append_by_another_writer_then_a_rerun_writes_no_episode_twice(
        exported: tuple[StreamConfig, Path, str], tmp_path: Path) -> None:
    def empty_append(episodes: Any, steps: Any) -> None:
        episodes.append(episodes.schema().as_arrow().empty_table())

    _again_with_more(exported, tmp_path, empty_append)


def test_a_compaction_of_both_tables_then_a_rerun_exports_every_step_once(
        exported: tuple[StreamConfig, Path, str], tmp_path: Path) -> None:
    def compaction(episodes: Any, steps: Any) -> None:
        for table in (episodes, steps):  # every file rewritten: one overwrite snapshot
            table.overwrite(table.scan().to_arrow())

    _again_with_more(exported, tmp_path, compaction)


def test_a_column_added_by_another_writer_then_a_rerun_exports_the_new_sessions_once(
        exported: tuple[StreamConfig, Path, str], tmp_path: Path) -> None:
    from pyiceberg.types import StringType

    def column(episodes: Any, steps: Any) -> None:
        """A column added, then filled in on every row (the files rewritten with it)."""
        for table in (episodes, steps):
            with table.update_schema() as update:
                update.add_column("reviewed_by", StringType())
            rows = table.scan().to_arrow()
            table.overwrite(rows.set_column(rows.schema.get_field_index("reviewed_by"),
                                            "reviewed_by",
                                            pa.array(["alice"] * rows.num_rows, pa.string())))

    _again_with_more(exported, tmp_path, column)


def test_a_partition_field_added_by_another_writer_then_a_rerun_exports_once(
        exported: tuple[StreamConfig, Path, str], tmp_path: Path) -> None:
    def partition(episodes: Any, steps: Any) -> None:
        """A partition field added, then the files rewritten under the new spec."""
        with episodes.update_spec() as update:
            update.add_identity("model_component_id")
        episodes.overwrite(episodes.scan().to_arrow())

    _again_with_more(exported, tmp_path, partition)


def test_the_exports_rows_deleted_by_another_writer_are_refused_in_one_line(
        exported: tuple[StreamConfig, Path, str]) -> None:
    config, catalog, group = exported
    episodes = _catalog(catalog).load_table(f"{TABLE}_episodes")
    held = episodes.scan().to_arrow().num_rows
    session = episodes.scan(limit=1).to_arrow().column("session_id")[0].as_py()
    episodes.delete(f"session_id = '{session}'")
    left = episodes.scan().to_arrow().num_rows
    _publish(config, seed=2)

    run = subprocess.run(_cli(config, catalog, group), capture_output=True, text=True,
                         timeout=300)

    assert run.returncode != 0
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), run.stderr[-2000:]
    assert f"holds {left} rows where the export's last commit" in lines[0]
    assert f"left {held}" in lines[0]
    assert _catalog(catalog).load_table(f"{TABLE}_episodes").scan().to_arrow().num_rows == left

"""An export over records a transactional producer wrote (a Kafka Streams or Flink job
copying the events exactly once): commit markers and aborted transactions' records take
offsets no read-committed consumer is handed. `--until-end` waited for them for ever."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.dataset as pads
import pytest

from rlmesh_stream.consumers.datasets.episodes import Filters
from rlmesh_stream.consumers.datasets.export import ExportOptions, run_export
from rlmesh_stream.consumers.runtime import RuntimeOptions
from rlmesh_stream.infra.topics import ensure_topics
from rlmesh_stream.producer.hooks import KafkaRuntimeHooks
from rlmesh_stream.producer.simulator import simulate_fleet
from rlmesh_stream.schemas.connection.config import StreamConfig
from tests.publishing import close_delivered
from tests.record_copies import copy_records, new_prefix

pytest.importorskip("pyiceberg")
pytestmark = [pytest.mark.stack, pytest.mark.slow]
TABLE = "rl.tx"


@pytest.fixture(scope="module")
def copied(stack: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[
        tuple[StreamConfig, list[dict[str, Any]]]]:
    """A fleet copied in 6 committed transactions (each followed by an aborted one), and
    the clean Parquet export of the original's episodes."""
    original, copy = new_prefix(stack), new_prefix(stack)
    for config in (original, copy):
        ensure_topics(config, partitions=4)
    hooks = KafkaRuntimeHooks(config=original, install_exit_handlers=False)
    simulate_fleet(hooks, sessions=12, lanes=2, episodes=3, seed=9, failure_rate=0.1)
    close_delivered(hooks)
    copy_records(original, copy, transactions=6)
    clean = tmp_path_factory.mktemp("clean") / "ds"
    run_export(original, ExportOptions(clean, "parquet", "rlmesh/tx-v0", Filters()),
               RuntimeOptions(group_id=f"g-{uuid.uuid4().hex[:8]}", from_beginning=True,
                              until_end=True))
    episodes = pads.dataset(clean / "episodes", partitioning="hive").to_table()
    yield copy, _sorted(episodes.drop_columns(["env"]))


def _sorted(table: Any) -> list[dict[str, Any]]:
    return list(table.sort_by([("session_id", "ascending"),
                               ("episode_record_id", "ascending")]).to_pylist())


def _cli(config: StreamConfig, *where: str) -> list[str]:
    return [sys.executable, "-m", "rlmesh_stream.infra.cli", "export", "trajectories",
            "--bootstrap", config.bootstrap, "--registry-url", config.registry_url,
            "--topic-prefix", config.topic_prefix, "--from-beginning", "--until-end",
            "--quiet", *where]


def test_a_parquet_export_over_transactions_ends_with_every_episode(
        copied: tuple[StreamConfig, list[dict[str, Any]]], tmp_path: Path) -> None:
    config, clean = copied
    out = tmp_path / "ds"

    run = subprocess.run(_cli(config, "--format", "parquet", "--out", str(out)),
                         capture_output=True, text=True, timeout=90)

    assert run.returncode == 0, run.stderr[-2000:]
    episodes = pads.dataset(out / "episodes", partitioning="hive").to_table()
    assert _sorted(episodes.drop_columns(["env"])) == clean


def test_two_iceberg_members_over_transactions_end_with_a_clean_runs_rows(
        copied: tuple[StreamConfig, list[dict[str, Any]]], tmp_path: Path) -> None:
    """Each member also waits for the other's stored offsets to reach the ends."""
    from pyiceberg.catalog.sql import SqlCatalog

    config, clean = copied
    catalog = tmp_path / "catalog.db"
    where = ("--format", "iceberg", "--catalog", f"sqlite:///{catalog}", "--table", TABLE,
             "--group", f"g-{uuid.uuid4().hex[:8]}")
    members = [subprocess.Popen(_cli(config, *where), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True) for _ in range(2)]
    try:
        outputs = [m.communicate(timeout=120) for m in members]
    finally:
        for m in members:
            m.kill()

    assert [m.returncode for m in members] == [0, 0], [err[-1500:] for _, err in outputs]
    cat = SqlCatalog("rlmesh", uri=f"sqlite:///{catalog}", init_catalog_tables="false",
                     warehouse=(catalog.parent / "warehouse").as_uri())
    assert _sorted(cat.load_table(f"{TABLE}_episodes").scan().to_arrow()) == clean
    summary = json.loads(outputs[0][0].splitlines()[0])
    assert (summary["gaps"], summary["duplicates"]) == (0, 0)

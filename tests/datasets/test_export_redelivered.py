"""Re-delivered records (the hook's spool replayed, an acknowledgement lost: the same key,
value and `rlmesh.ps` header again) are dropped before the export joins them: Parquet,
Iceberg and Minari datasets over a copy of a fleet with re-deliveries are the original's,
and the certificate counts the duplicates. The exporter counted them, then joined them
anyway: most episodes were skipped as misaligned."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.dataset as pads
import pytest

from rlmesh_stream.consumers.datasets.episodes import Filters
from rlmesh_stream.consumers.datasets.export import DatasetSink, ExportOptions, run_export
from rlmesh_stream.consumers.datasets.iceberg import IcebergTarget
from rlmesh_stream.consumers.runtime import RuntimeOptions
from rlmesh_stream.infra.topics import ensure_topics
from rlmesh_stream.producer.hooks import KafkaRuntimeHooks
from rlmesh_stream.producer.simulator import simulate_fleet
from rlmesh_stream.schemas.connection.config import StreamConfig
from tests.datasets.test_export_crash import _cli, _generation
from tests.publishing import close_delivered
from tests.record_copies import copy_records, new_prefix

pytestmark = [pytest.mark.stack, pytest.mark.slow]

EVERY, LATER = 40, 25  # every 40th record re-delivered 25 records later
PARTITIONS = 3
KILLS = 4


@dataclass
class Copies:
    original: StreamConfig
    copy: StreamConfig  # every EVERY-th record again, LATER records on
    repeated: int  # records written twice


@pytest.fixture(scope="module")
def copies(stack: Any) -> Iterator[Copies]:
    original, copy = new_prefix(stack), new_prefix(stack)
    for config in (original, copy):
        ensure_topics(config, partitions=PARTITIONS)
    hooks = KafkaRuntimeHooks(config=original, install_exit_handlers=False)
    simulate_fleet(hooks, sessions=16, lanes=2, episodes=4, seed=4, failure_rate=0.2,
                   lane_driven=2)
    close_delivered(hooks)
    records = copy_records(original, copy, repeat_every=EVERY, repeat_later=LATER)
    yield Copies(original, copy, len(records) // EVERY)


def _export(config: StreamConfig, out: Path | None, fmt: str, *, group: str | None = None,
            iceberg: IcebergTarget | None = None, **runtime: Any) -> DatasetSink:
    group = group or f"g-{uuid.uuid4().hex[:8]}"
    sink, _ = run_export(config, ExportOptions(out, fmt, "rlmesh/redelivered-v0", Filters(),
                                               iceberg=iceberg, group=group),
                         RuntimeOptions(group_id=group, from_beginning=True, until_end=True,
                                        **runtime))
    return sink


def _parquet(out: Path) -> dict[str, list[dict[str, Any]]]:
    tables = {}
    for name, order in (("episodes", ("session_id", "episode_record_id")),
                        ("steps", ("session_id", "episode_record_id", "step"))):
        table = pads.dataset(out / name, partitioning="hive").to_table()
        tables[name] = table.sort_by([(c, "ascending") for c in order]).to_pylist()
    return tables


def test_a_parquet_export_over_redelivered_records_is_the_originals(
        copies: Copies, tmp_path: Path) -> None:
    _export(copies.original, tmp_path / "original", "parquet")

    sink = _export(copies.copy, tmp_path / "copy", "parquet")

    original = _parquet(tmp_path / "original")
    assert len(original["episodes"]) > 20
    assert _parquet(tmp_path / "copy") == original
    certificate = sink.store.committed.certificate
    assert (certificate["duplicates"], certificate["gaps"]) == (copies.repeated, 0)


def test_a_parquet_export_killed_and_restarted_over_redelivered_records_is_the_originals(
        copies: Copies, tmp_path: Path) -> None:
    """Each restart reads the open episodes' records again (from their first offsets) and
    the duplicates of records a killed run read: both decided as the killed run did."""
    out = tmp_path / "killed"
    command = [*_cli(copies.copy, out), "--max-batch", "150", "--checkpoint-interval", "0.05"]
    for _ in range(KILLS):
        before = _generation(out)
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while _generation(out) < before + 2 and proc.poll() is None and (
                time.monotonic() < deadline):
            time.sleep(0.01)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    final = subprocess.run(command, capture_output=True, text=True, timeout=300)
    _export(copies.original, tmp_path / "original", "parquet")

    assert final.returncode == 0, final.stderr[-2000:]
    assert _generation(out) > 0
    assert _parquet(out) == _parquet(tmp_path / "original")
    certificate = json.loads((out / ".rlmesh-export" / "manifest.json").read_text())[
        "certificate"]
    assert (certificate["duplicates"], certificate["gaps"]) == (copies.repeated, 0)


def _iceberg(catalog: Path, table: str) -> dict[str, list[dict[str, Any]]]:
    from pyiceberg.catalog.sql import SqlCatalog

    cat = SqlCatalog("rlmesh", uri=f"sqlite:///{catalog}", init_catalog_tables="false",
                     warehouse=(catalog.parent / "warehouse").as_uri())
    out = {}
    for name, order in (("episodes", ("session_id", "episode_record_id")),
                        ("steps", ("session_id", "episode_record_id", "step"))):
        rows = cat.load_table(f"{table}_{name}").scan().to_arrow()
        out[name] = rows.sort_by([(c, "ascending") for c in order]).to_pylist()
    return out


def test_an_iceberg_export_over_redelivered_records_is_the_originals(
        copies: Copies, tmp_path: Path) -> None:
    pytest.importorskip("pyiceberg")
    catalog = tmp_path / "catalog.db"
    for config, table in ((copies.original, "rl.original"), (copies.copy, "rl.copy")):
        _export(config, None, "iceberg",
                iceberg=IcebergTarget(f"sqlite:///{catalog}", table))

    original = _iceberg(catalog, "rl.original")
    assert len(original["episodes"]) > 20
    assert _iceberg(catalog, "rl.copy") == original


def _minari(out: Path) -> list[tuple[Any, ...]]:
    import minari

    os.environ["MINARI_DATASETS_PATH"] = str(out)
    dataset = minari.load_dataset("rlmesh/redelivered-v0")
    metas = dataset.storage.get_episode_metadata(range(dataset.total_episodes))
    return sorted((m["session_id"], m["episode_record_id"], e.observations.tobytes(),
                   np.asarray(e.actions).tobytes(), e.rewards.tobytes(),
                   e.terminations.tobytes(), e.truncations.tobytes())
                  for e, m in zip(dataset.iterate_episodes(), metas, strict=True))


def test_a_minari_export_over_redelivered_records_is_the_originals(
        copies: Copies, tmp_path: Path) -> None:
    _export(copies.original, tmp_path / "original", "minari")

    _export(copies.copy, tmp_path / "copy", "minari")

    original = _minari(tmp_path / "original")
    assert len(original) > 20
    assert _minari(tmp_path / "copy") == original

"""A disk that fills under a DuckDB store or a Parquet export: the run stops with one
`Error:` line saying so, and once there is room again the same command run again ends
with everything a clean run has, nothing lost or applied twice.

The disk is a small tmpfs mounted for the test (root in a mount namespace; skipped,
saying why, elsewhere), sized at half of what the clean run wrote, so it fills mid-run;
"room again" is the same mount remounted larger, its files kept.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pyarrow.dataset as pads
import pytest

from rlmesh_stream.producer.simulator import simulate_fleet
from rlmesh_stream.schemas.cli_values import STATE_DIR
from rlmesh_stream.schemas.connection.config import StreamConfig
from tests.consumers.consumer_helpers import (
    PlainKafkaHooks,
    create_topics,
    query,
    run_offline,
    snapshot,
)
from tests.datasets.fleet_export import DATASET, clean_export, publish_fleet
from tests.mounts import grow_tmpfs, small_tmpfs

pytestmark = [pytest.mark.stack, pytest.mark.timeout(600)]

def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else (
        path.stat().st_size)


def _published(config: StreamConfig) -> int:
    create_topics(config, partitions=3)
    hooks = PlainKafkaHooks(config)
    manifest = simulate_fleet(hooks, sessions=300, lanes=3, episodes=4, seed=17,
                              window_every=5)
    hooks.flush()
    return manifest.total_events


def _cli(config: StreamConfig, *args: str) -> list[str]:
    return [sys.executable, "-m", "rlmesh_stream.infra.cli", *args,
            "--bootstrap", config.bootstrap, "--registry-url", config.registry_url,
            "--topic-prefix", config.topic_prefix, "--group", f"g-{uuid.uuid4().hex[:8]}",
            "--from-beginning", "--until-end", "--quiet", "--max-batch", "2000",
            "--checkpoint-interval", "0.2"]


def _one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 1, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert len(lines) == 1 and lines[0].startswith("Error: "), done.stderr[-3000:]
    return lines[0]


def _stored(url: str) -> int:
    """The records the store's offsets account for (every builder reads every topic)."""
    rows = query(url, "SELECT max(next_offset) FROM consumer_offsets GROUP BY topic, "
                      "partition_id")
    return sum(int(n) for (n,) in rows)


def test_a_full_disk_under_a_duckdb_store_stops_in_one_line_and_a_rerun_loses_nothing(
    stream_config: StreamConfig, tmp_path: Path,
) -> None:
    total = _published(stream_config)
    clean = tmp_path / "clean.duckdb"
    run_offline(stream_config, f"duckdb://{clean}", ["all"])

    with small_tmpfs(tmp_path / "disk", _size(clean) // 2) as disk:
        command = _cli(stream_config, "consume", "all", "--sink", f"duckdb://{disk}/s.duckdb")
        full = subprocess.run(command, capture_output=True, text=True, timeout=300)
        line = _one_error_line(full)
        grow_tmpfs(disk)
        # the disk filled mid-run: some records were checkpointed, not all
        assert 0 < _stored(f"duckdb://{disk}/s.duckdb") < total
        again = subprocess.run(command, capture_output=True, text=True, timeout=300)
        assert again.returncode == 0, again.stderr[-3000:]
        refilled = snapshot(f"duckdb://{disk}/s.duckdb")
        delivery = query(f"duckdb://{disk}/s.duckdb",
                         "SELECT records, duplicates, gaps FROM delivery_producers")

    assert "disk is full" in line and "No space left on device" in line, line
    assert refilled == snapshot(f"duckdb://{clean}")
    assert delivery == [(total, 0, 0)]


def _generation(out: Path) -> int:
    manifest = out / STATE_DIR / "manifest.json"
    return int(json.loads(manifest.read_text())["generation"]) if manifest.exists() else 0


def _rows(out: Path, kind: str) -> list[dict[str, Any]]:
    table = pads.dataset(out / kind, partitioning="hive").to_table()
    keys = ["session_id", "episode_record_id"] + (["step"] if kind == "steps" else [])
    return table.sort_by([(k, "ascending") for k in keys]).to_pylist()


def test_a_full_disk_under_a_parquet_export_stops_in_one_line_and_a_rerun_loses_nothing(
    stack: Any, tmp_path: Path,
) -> None:
    config = publish_fleet(stack, partitions=3, sessions=60, episodes=4, seed=17)
    clean = clean_export(config, tmp_path / "clean")
    assert _rows(clean, "episodes")  # episodes to lose

    with small_tmpfs(tmp_path / "disk", _size(clean) // 2) as disk:
        out = disk / "ds"
        command = _cli(config, "export", "trajectories", "--format", "parquet",
                       "--out", str(out), "--dataset-id", DATASET)
        full = subprocess.run(command, capture_output=True, text=True, timeout=300)
        line = _one_error_line(full)
        grow_tmpfs(disk)
        assert _generation(out) > 0  # the disk filled mid-run, after commits
        again = subprocess.run(command, capture_output=True, text=True, timeout=300)
        assert again.returncode == 0, again.stderr[-3000:]
        rows = {kind: _rows(out, kind) for kind in ("episodes", "steps")}

    assert "disk is full" in line and "No space left on device" in line, line
    assert rows == {kind: _rows(clean, kind) for kind in ("episodes", "steps")}

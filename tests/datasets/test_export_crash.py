"""SIGKILL at random moments while exporting a fleet, restart each time: the final dataset
equals a clean run's, and its certificate reports 0 gaps and 0 duplicates."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
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

pytestmark = [pytest.mark.stack, pytest.mark.slow]
KILLS = 10


def _cli(config: StreamConfig, out: Path, fmt: str = "parquet") -> list[str]:
    return [sys.executable, "-m", "rlmesh_stream.infra.cli", "export", "trajectories",
            "--bootstrap", config.bootstrap, "--registry-url", config.registry_url,
            "--topic-prefix", config.topic_prefix, "--out", str(out), "--format", fmt,
            "--dataset-id", "rlmesh/x-v0", "--from-beginning", "--until-end", "--quiet",
            "--group", f"g-{uuid.uuid4().hex[:8]}"]


def _fleet(stack: Any, **size: Any) -> tuple[StreamConfig, Any]:
    config = StreamConfig.from_env(env={}, bootstrap=stack.bootstrap,
                                   registry_url=stack.registry_url,
                                   topic_prefix=f"t{uuid.uuid4().hex[:10]}.rlmesh.runtime")
    ensure_topics(config, partitions=3)
    hooks = KafkaRuntimeHooks(config=config, install_exit_handlers=False)
    manifest = simulate_fleet(hooks, lanes=3, seed=3, failure_rate=0.1, next_step_fraction=1.0,
                              window_every=50, **size)
    close_delivered(hooks)
    return config, manifest


def _kill_repeatedly(config: StreamConfig, out: Path, fmt: str, kills: int) -> list[int]:
    """Start the export, SIGKILL it at a random moment after it has committed, `kills` times;
    returns the committed generation after each kill."""
    rng = random.Random(7)
    generations = []
    for _ in range(kills):
        before = _generation(out)
        proc = subprocess.Popen(_cli(config, out, fmt), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while _generation(out) == before and proc.poll() is None and (
                time.monotonic() < deadline):
            time.sleep(0.05)
        time.sleep(rng.uniform(0.0, 1.5))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        generations.append(_generation(out))
    return generations


def _rows(out: Path, kind: str) -> list[dict[str, Any]]:
    table = pads.dataset(out / kind, partitioning="hive").to_table()
    keys = ["session_id", "episode_record_id"] + (["step"] if kind == "steps" else [])
    return table.sort_by([(k, "ascending") for k in keys]).to_pylist()


def _generation(out: Path) -> int:
    path = out / ".rlmesh-export" / "manifest.json"
    return json.loads(path.read_text())["generation"] if path.exists() else 0


def test_sigkilled_exports_restarted_give_the_clean_runs_dataset(stack, tmp_path):
    config, manifest = _fleet(stack, sessions=60, episodes=40)
    assert sum(s.total_steps for s in manifest.sessions) >= 50_000
    clean = tmp_path / "clean"
    run_export(config, ExportOptions(clean, "parquet", "rlmesh/x-v0", Filters()),
               RuntimeOptions(group_id=f"g-{uuid.uuid4().hex[:8]}", from_beginning=True,
                              until_end=True))

    crashed = tmp_path / "crashed"
    generations = _kill_repeatedly(config, crashed, "parquet", KILLS)
    final = subprocess.run(_cli(config, crashed), capture_output=True, text=True, timeout=300)

    assert final.returncode == 0, final.stderr[-2000:]
    assert generations == sorted(set(generations)) and generations[0] > 0  # each committed
    assert _rows(crashed, "episodes") == _rows(clean, "episodes")
    assert _rows(crashed, "steps") == _rows(clean, "steps")
    cert = json.loads((crashed / ".rlmesh-export" / "manifest.json").read_text())["certificate"]
    assert (cert["gaps"], cert["duplicates"]) == (0, 0)
    assert cert["steps_exported"] == sum(
        e.steps for e in manifest.episodes if e.status != "aborted")


def _minari_episodes(root: Path) -> dict[tuple[str, str], tuple[Any, ...]]:
    from minari.dataset.minari_storage import MinariStorage

    storage = MinariStorage.read(root / "rlmesh" / "x-v0" / "data")
    ids = range(storage.total_episodes)
    return {(m["session_id"], m["episode_record_id"]): (
        e["observations"].tobytes(), e["actions"].tobytes(), e["rewards"].tobytes(),
        e["terminations"].tobytes(), e["truncations"].tobytes(), m.get("seed"))
        for m, e in zip(storage.get_episode_metadata(ids), storage.get_episodes(ids),
                        strict=True)}


def test_sigkilled_minari_exports_restarted_give_the_clean_runs_dataset(stack, tmp_path):
    config, manifest = _fleet(stack, sessions=20, episodes=20)
    clean = tmp_path / "clean"
    sink, runtime = run_export(config, ExportOptions(clean, "minari", "rlmesh/x-v0", Filters()),
                               RuntimeOptions(group_id=f"g-{uuid.uuid4().hex[:8]}",
                                              from_beginning=True, until_end=True))
    clean_run = (f"the clean export read {runtime.events} records and skipped "
                 f"{dict(sink.joiner.skipped)}")

    crashed = tmp_path / "crashed"
    generations = _kill_repeatedly(config, crashed, "minari", 5)
    final = subprocess.run(_cli(config, crashed, "minari"), capture_output=True, text=True,
                           timeout=300)

    assert final.returncode == 0, final.stderr[-2000:]
    assert generations[0] > 0
    expected = _minari_episodes(clean)
    assert len(expected) == sum(e.status != "aborted" for e in manifest.episodes), clean_run
    assert _minari_episodes(crashed) == expected

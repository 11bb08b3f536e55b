"""The export's consumer group: a second member, a rebalance, a restart, co-partitioning.

Every case ends with the dataset a clean single run gives, row for row, or with one
clear line and nothing lost: sessions are owned whole (partition i of every trajectory
topic goes to one member), a revocation decides nothing, and a single-writer format
refuses a second member of its group."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.dataset as pads
import pytest
from confluent_kafka import Consumer

from rlmesh_stream.consumers.datasets.episodes import Filters
from rlmesh_stream.consumers.datasets.export import ExportOptions, make_export, run_export
from rlmesh_stream.consumers.runtime import RuntimeOptions
from rlmesh_stream.infra.topics import ensure_topics
from rlmesh_stream.schemas.connection.config import StreamConfig
from rlmesh_stream.schemas.contract.topics import EventType
from tests.datasets.fleet_export import DATASET, clean_export, publish_fleet
from tests.record_copies import new_prefix

pytestmark = [pytest.mark.stack, pytest.mark.slow]


@pytest.fixture(scope="module")
def fleet(stack: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[
        tuple[StreamConfig, Path]]:
    """A fleet on 4 partitions and a clean single export of it (the reference)."""
    config = publish_fleet(stack, partitions=4, sessions=60, episodes=15, seed=11)
    yield config, clean_export(config, tmp_path_factory.mktemp("clean") / "ds")


def _cli(config: StreamConfig, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "rlmesh_stream.infra.cli", "export", "trajectories",
            "--bootstrap", config.bootstrap, "--registry-url", config.registry_url,
            "--topic-prefix", config.topic_prefix, "--out", str(out), "--format", "parquet",
            "--dataset-id", DATASET, "--from-beginning", "--until-end", "--quiet", *extra]


def _rows(out: Path, kind: str) -> list[dict[str, Any]]:
    table = pads.dataset(out / kind, partitioning="hive").to_table()
    keys = ["session_id", "episode_record_id"] + (["step"] if kind == "steps" else [])
    return table.sort_by([(k, "ascending") for k in keys]).to_pylist()


def _certificate(out: Path) -> dict[str, Any]:
    manifest = json.loads((out / ".rlmesh-export" / "manifest.json").read_text())
    return dict(manifest["certificate"])


def _generation(out: Path) -> int:
    path = out / ".rlmesh-export" / "manifest.json"
    return int(json.loads(path.read_text())["generation"]) if path.exists() else 0


def _wait_for_commit(out: Path, proc: subprocess.Popen[str] | None = None) -> None:
    deadline = time.monotonic() + 120
    while _generation(out) == 0 and time.monotonic() < deadline and (
            proc is None or proc.poll() is None):
        time.sleep(0.05)


def _same_as_clean(out: Path, clean: Path) -> None:
    assert _rows(out, "episodes") == _rows(clean, "episodes")
    assert _rows(out, "steps") == _rows(clean, "steps")
    cert = _certificate(out)
    assert (cert["gaps"], cert["duplicates"]) == (0, 0)
    assert cert["episodes_skipped"] == _certificate(clean)["episodes_skipped"]


def test_two_exports_of_one_dataset_into_different_directories_each_get_all_of_it(
        fleet: tuple[StreamConfig, Path], tmp_path: Path) -> None:
    config, clean = fleet
    # small checkpoints, and the second started once the first has committed: both are
    # surely members at once (on an idle machine the first used to be done before the
    # second joined, and a shared default group went unnoticed)
    paced = ("--max-batch", "100")
    first = subprocess.Popen(_cli(config, tmp_path / "a", *paced), stderr=subprocess.PIPE,
                             text=True)
    _wait_for_commit(tmp_path / "a", first)
    second = subprocess.Popen(_cli(config, tmp_path / "b", *paced), stderr=subprocess.PIPE,
                              text=True)
    _, err = first.communicate(timeout=600)
    _, err2 = second.communicate(timeout=600)

    assert (first.returncode, second.returncode) == (0, 0), err[-2000:] + err2[-2000:]
    _same_as_clean(tmp_path / "a", clean)
    _same_as_clean(tmp_path / "b", clean)


def test_a_second_member_of_a_parquet_exports_group_is_refused_and_nothing_is_lost(
        fleet: tuple[StreamConfig, Path], tmp_path: Path) -> None:
    """The first export runs live (so it is surely a member when the second joins), is
    stopped, then finished with --until-end."""
    config, clean = fleet
    group = f"g-{uuid.uuid4().hex[:8]}"
    live = [a for a in _cli(config, tmp_path / "a", "--group", group) if a != "--until-end"]
    first = subprocess.Popen(live, stderr=subprocess.PIPE, text=True)
    _wait_for_commit(tmp_path / "a", first)
    second = subprocess.run(_cli(config, tmp_path / "b", "--group", group),
                            capture_output=True, text=True, timeout=600)
    first.send_signal(signal.SIGTERM)
    _, err = first.communicate(timeout=600)
    finish = subprocess.run(_cli(config, tmp_path / "a", "--group", group),
                            capture_output=True, text=True, timeout=600)

    assert second.returncode != 0
    assert second.stderr.strip().splitlines()[-1].startswith(
        f"Error: consumer group {group} already has a member"), second.stderr[-2000:]
    assert not (tmp_path / "b" / "steps").exists()
    assert first.returncode == 0, err[-2000:]
    assert finish.returncode == 0, finish.stderr[-2000:]
    _same_as_clean(tmp_path / "a", clean)


def test_a_rebalance_in_the_middle_of_a_run_loses_no_episode(
        fleet: tuple[StreamConfig, Path], tmp_path: Path) -> None:
    """What a loaded machine does to one exporter (a member timing out, another joining
    for a moment): its partitions are revoked and come back."""
    config, clean = fleet
    out = tmp_path / "a"
    group = f"g-{uuid.uuid4().hex[:8]}"
    sink, runtime = make_export(config, ExportOptions(out, "parquet", DATASET, Filters()),
                                RuntimeOptions(group_id=group, from_beginning=True,
                                               until_end=True, max_batch=2000))

    def export() -> None:
        runtime.run()
        sink.finish()
        sink.close()

    thread = threading.Thread(target=export)
    thread.start()
    _wait_for_commit(out)
    visitor = Consumer({**config.kafka_config(), "group.id": group,
                        "partition.assignment.strategy":
                            runtime._kafka_config()["partition.assignment.strategy"]})
    visitor.subscribe(runtime.topics)
    deadline = time.monotonic() + 60
    while not visitor.assignment() and time.monotonic() < deadline:
        visitor.poll(0.2)
    time.sleep(2.0)
    visitor.close()
    thread.join(600)

    assert not thread.is_alive()
    _same_as_clean(out, clean)


def test_trajectory_topics_with_different_partition_counts_are_refused_in_one_line(
        stack: Any, tmp_path: Path) -> None:
    config = new_prefix(stack)
    steps = EventType.STEP_COMPLETED.topic(config.topic_prefix)
    ensure_topics(config, partitions=2,
                  topics=[et.topic(config.topic_prefix) for et in EventType if
                          et is not EventType.STEP_COMPLETED])
    ensure_topics(config, partitions=3, topics=[steps])

    run = subprocess.run(_cli(config, tmp_path / "a"), capture_output=True, text=True,
                         timeout=300)

    assert run.returncode != 0
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: the trajectory topics must have "
                                                   "the same number of partitions"), lines
    assert f"{steps} has 3" in lines[0]


def _du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of 64 KiB (ENOSPC soon); grown with `mount -o remount,size=...`."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)], check=True)
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def test_a_full_disk_then_an_immediate_restart_loses_no_episode(
        fleet: tuple[StreamConfig, Path], small_disk: Path) -> None:
    config, clean = fleet
    out = small_disk / "ds"
    group = f"g-{uuid.uuid4().hex[:8]}"
    full = subprocess.run(_cli(config, out, "--group", group, "--max-batch", "2000"),
                          capture_output=True, text=True, timeout=600)
    subprocess.run(["mount", "-o", f"remount,size={4 * _du(clean) + (8 << 20)}",
                    str(small_disk)], check=True)
    again = subprocess.run(_cli(config, out, "--group", group), capture_output=True,
                           text=True, timeout=600)

    assert full.returncode != 0
    assert "No space left on device" in full.stderr.strip().splitlines()[-1], full.stderr
    assert again.returncode == 0, again.stderr[-2000:]
    _same_as_clean(out, clean)


class _StopAfterACheckpoint:
    """A progress display that sends its own process SIGTERM, as a user stopping the
    export does, once a checkpoint is written."""

    def __init__(self) -> None:
        self.sent = False

    def update(self, events: int, lag: int | None) -> None:
        if events and not self.sent:
            self.sent = True
            os.kill(os.getpid(), signal.SIGTERM)

    def note(self, text: str) -> None:
        pass

    def count_with(self, written: object) -> None:
        pass

    def checkpointed(self, info: object) -> None:
        pass

    def close(self) -> None:
        pass


def test_an_until_end_export_stopped_before_the_end_decides_on_nothing(
        fleet: tuple[StreamConfig, Path], tmp_path: Path) -> None:
    """Stopped (SIGTERM, Ctrl-C) before the end, the export writes its last checkpoint
    and decides on no open episode: the next run finishes them. It used to decide at
    once, as if at the end: the open episodes, half read, were skipped as incomplete,
    and the next run resumed past them."""
    config, clean = fleet
    out = tmp_path / "a"
    options = RuntimeOptions(group_id=f"g-{uuid.uuid4().hex[:8]}", from_beginning=True,
                             until_end=True, max_batch=500)
    stopper = _StopAfterACheckpoint()
    run_export(config, ExportOptions(out, "parquet", DATASET, Filters()), options,
               progress=stopper)  # type: ignore[arg-type]
    stopped_at = _certificate(out)
    run_export(config, ExportOptions(out, "parquet", DATASET, Filters()), options)

    assert stopper.sent
    assert stopped_at["episodes_exported"] < _certificate(clean)["episodes_exported"]
    _same_as_clean(out, clean)

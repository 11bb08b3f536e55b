"""The producer's spool directory full, or read-only, while the rollout runs.

The registry is down when the producer starts, so every event it accepts
must wait in the spool; the spool is a tiny tmpfs (really full: ENOSPC) or a
read-only bind mount (EROFS). The rollout must neither crash nor hang: each
event that cannot be spooled is counted failed with the OS error in the log,
and once the registry is back everything that was spooled is delivered, once.
Needs root (mount); skipped otherwise.
"""

from __future__ import annotations

import contextlib
import logging
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from fault_harness import (
    ConsumerProcess,
    FaultTable,
    ProducerRun,
    fresh_database,
    scenario_config,
    verdict,
    wait_caught_up,
    wait_until,
)

from infra.cluster import LocalCluster

pytestmark = pytest.mark.timeout(600)

SPOOL_BYTES = 256 * 1024
ROLLOUT_LIMIT_S = 60.0  # the whole simulated rollout, flat out, must end well within this


def _mount(*args: str) -> None:
    done = subprocess.run(["mount", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount ({done.stderr.strip()}): needs root in a mount namespace")


@contextlib.contextmanager
def tiny_tmpfs(path: Path) -> Iterator[Path]:
    path.mkdir()
    _mount("-t", "tmpfs", "-o", f"size={SPOOL_BYTES}", "tmpfs", str(path))
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


@contextlib.contextmanager
def made_read_only(path: Path) -> Iterator[None]:
    """Remount `path` read-only in place (a bind mount over itself)."""
    _mount("--bind", str(path), str(path))
    try:
        _mount("-o", "remount,bind,ro", str(path))
        yield
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def run_with_spool_fault(
    cluster: LocalCluster, postgres_dsn: str, tmp_path: Path, spool: Path,
    fault: contextlib.AbstractContextManager[None] | None,
) -> tuple[ProducerRun, str]:
    config = scenario_config(cluster.bootstrap, cluster.registry_url)
    sink = fresh_database(postgres_dsn)
    group = f"rlmesh-stream.{config.topic_prefix.split('.')[0]}"
    consumer = ConsumerProcess(config, sink, group, tmp_path, "spool")
    cluster.stop_registry()
    try:
        run = ProducerRun(config, seed=30, sessions=20, rate=0.0,
                          settings={"overflow": "spool", "spool_dir": spool},
                          gate=threading.Event())
        run.start()
        wait_until("the hook to be built", lambda: run.hooks is not None or run.error is not None,
                   30, 0.1)
        with fault or contextlib.nullcontext():
            assert run.gate is not None
            run.gate.set()  # the rollout starts with the fault in place
            wait_until("the rollout to end", lambda: run.seconds is not None,
                       ROLLOUT_LIMIT_S, 0.2)
            assert run.hooks is not None and run.hooks.stats().delivered == 0
    finally:
        cluster.start_registry()
    run.join(240)
    wait_caught_up(config, group)
    assert consumer.stop() == 0
    return run, sink


def test_a_full_spool_counts_what_it_cannot_hold_and_delivers_the_rest(
    cluster: LocalCluster, postgres_dsn: str, fault_table: FaultTable, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.ERROR), tiny_tmpfs(tmp_path / "spool") as spool:
        run, sink = run_with_spool_fault(cluster, postgres_dsn, tmp_path, spool, None)
    v = verdict(f"spool directory full ({SPOOL_BYTES // 1024} KiB tmpfs) while the registry "
                "is down", sink, [run])
    fault_table.add(v)
    assert run.stats is not None
    assert run.stats.failed_total > 0 and run.stats.delivered > 0
    assert "No space left on device" in caplog.text
    assert (v.lost, v.duplicates) == (0, 0)


def test_a_read_only_spool_counts_every_event_it_cannot_hold(
    cluster: LocalCluster, postgres_dsn: str, fault_table: FaultTable, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    spool = tmp_path / "spool"
    spool.mkdir()
    with caplog.at_level(logging.ERROR):
        run, sink = run_with_spool_fault(cluster, postgres_dsn, tmp_path, spool,
                                         made_read_only(spool))
    v = verdict("spool directory read-only while the registry is down", sink, [run])
    fault_table.add(v)
    assert run.stats is not None and run.stats.failed_total > 0
    assert "Read-only file system" in caplog.text
    assert (v.lost, v.duplicates) == (0, 0)

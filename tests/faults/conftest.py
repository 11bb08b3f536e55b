"""Fixtures of the fault suite: a three-broker cluster with a registry, and PostgreSQL.

Both are started once per run on loopback in temporary directories and
always stopped (PostgreSQL is the run's shared server, from tests/conftest.py).
The fault table (docs/fault-results.md) is rewritten at the end of the run from
the scenarios that ran, keeping the rows of those that did not.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from rlmesh_stream.infra.cluster import LocalCluster, cluster_home
from rlmesh_stream.infra.proc import free_port
from tests.faults.fault_harness import FaultTable

RESULTS = Path(__file__).parents[2] / "docs" / "fault-results.md"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = str(Path(__file__).parent)
    for item in items:
        if str(item.path).startswith(here):
            item.add_marker(pytest.mark.faults)


@dataclass(frozen=True)
class ClusterUp:
    """What `rlmesh-stream infra up --brokers 3` printed, and its exit status."""

    returncode: int
    stdout: str
    stderr: str


@pytest.fixture(scope="session")
def cluster_up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ClusterUp, Path]]:
    """The cluster, started the way a person does: `rlmesh-stream infra up --brokers 3`."""
    home = tmp_path_factory.mktemp("stack")
    first = _free_consecutive_ports(3)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLMESH_STREAM_")}
    cli = [sys.executable, "-m", "rlmesh_stream.infra.cli", "infra"]
    try:
        done = subprocess.run([*cli, "up", "--brokers", "3", "--home", str(home),
                               "--kafka-port", str(first), "--registry-port", str(free_port())],
                              env=env, capture_output=True, text=True, timeout=600, check=False)
        yield ClusterUp(done.returncode, done.stdout, done.stderr), home
    finally:
        subprocess.run([*cli, "down", "--home", str(home)], env=env, capture_output=True,
                       timeout=300, check=False)
        LocalCluster(cluster_home(home), brokers=3).down()  # whatever `down` left running


@pytest.fixture(scope="session")
def cluster(cluster_up: tuple[ClusterUp, Path]) -> LocalCluster:
    """Three combined KRaft nodes (quorum of three, three brokers) and Apicurio."""
    up, home = cluster_up
    assert up.returncode == 0, up.stderr[-3000:]
    return LocalCluster(cluster_home(home), brokers=3)


@pytest.fixture(scope="session")
def fault_table() -> Iterator[FaultTable]:
    table = FaultTable.load(RESULTS)
    yield table
    if table.updated:
        table.save(RESULTS)


def _free_consecutive_ports(count: int) -> int:
    """The first of `count` consecutive free loopback ports (`--kafka-port` and up)."""
    for _ in range(200):
        first = free_port()
        if first + count > 65535:
            continue
        try:
            for port in range(first, first + count):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
        except OSError:
            continue
        return first
    raise RuntimeError("no run of free consecutive ports on 127.0.0.1")


@pytest.fixture(scope="session")
def postgres_dsn(postgres: str) -> str:
    """The server itself: each scenario makes its own databases (`fresh_database`), and
    several consumer processes share one of them as their sink."""
    return postgres

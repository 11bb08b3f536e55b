"""Fixtures of the fault suite: a three-broker cluster with a registry, and PostgreSQL.

Both are started once per run on loopback in temporary directories and
always stopped. The fault table (docs/fault-results.md) is rewritten at the
end of the run from the scenarios that ran, keeping the rows of those that
did not.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fault_harness import FaultTable

from infra.cluster import LocalCluster, cluster_home

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
    cli = [sys.executable, "-m", "infra.cli", "infra"]
    try:
        done = subprocess.run([*cli, "up", "--brokers", "3", "--home", str(home),
                               "--kafka-port", str(first), "--registry-port", str(_free_port())],
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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _free_consecutive_ports(count: int) -> int:
    """The first of `count` consecutive free loopback ports (`--kafka-port` and up)."""
    for _ in range(200):
        first = _free_port()
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


def _as_postgres(cmd: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


@pytest.fixture(scope="session")
def postgres_dsn() -> Iterator[str]:
    """A throwaway PostgreSQL (Debian binaries): several consumer processes share one sink."""
    dsn = os.environ.get("RLMESH_STREAM_TEST_POSTGRES_DSN")
    if dsn:
        yield dsn
        return
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not found:
        pytest.skip("no PostgreSQL: apt-get install postgresql, or set "
                    "RLMESH_STREAM_TEST_POSTGRES_DSN")
    bindir = Path(found[-1]).parent
    root = Path(tempfile.mkdtemp(prefix="rlmesh-faults-pg-"))
    data, sock = root / "data", root / "sock"
    sock.mkdir()
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
        shutil.chown(sock, "postgres")
    port = _free_port()
    subprocess.run(_as_postgres([str(bindir / "initdb"), "-D", str(data), "-U", "postgres",
                                 "-A", "trust", "--no-sync"]), check=True, capture_output=True)
    options = (f"-c listen_addresses=127.0.0.1 -p {port} -k {sock} -c fsync=off "
               "-c synchronous_commit=off -c full_page_writes=off")
    subprocess.run(_as_postgres([str(bindir / "pg_ctl"), "-D", str(data), "-o", options,
                                 "-l", str(root / "log"), "-w", "start"]),
                   check=True, capture_output=True)
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(_as_postgres([str(bindir / "pg_ctl"), "-D", str(data), "-m",
                                     "immediate", "-w", "stop"]), capture_output=True)
        shutil.rmtree(root, ignore_errors=True)

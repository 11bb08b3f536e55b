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
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from fault_harness import FaultTable

from infra.cluster import LocalCluster

RESULTS = Path(__file__).parents[2] / "docs" / "fault-results.md"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = str(Path(__file__).parent)
    for item in items:
        if str(item.path).startswith(here):
            item.add_marker(pytest.mark.faults)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """Three combined KRaft nodes (quorum of three, three brokers) and Apicurio."""
    cluster = LocalCluster(tmp_path_factory.mktemp("cluster"), brokers=3)
    try:
        cluster.up()
        yield cluster
    finally:
        cluster.down()


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

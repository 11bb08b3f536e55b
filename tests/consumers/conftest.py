"""Fixtures of the consumer tests: a throwaway PostgreSQL server, one database per test.

The server is started once per run from the Debian `postgresql` package's
binaries (initdb into a temporary directory, run as the `postgres` OS user
when the tests run as root, since PostgreSQL refuses to run as root), listening
on 127.0.0.1 and a free port with its socket in the same temporary directory.
`RLMESH_STREAM_TEST_POSTGRES_DSN` points the tests at an existing server instead.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pg_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def _as_postgres(cmd: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


@pytest.fixture(scope="session")
def postgres() -> Iterator[str]:
    """A DSN of a PostgreSQL server for the whole run (the `postgres` database)."""
    dsn = os.environ.get("RLMESH_STREAM_TEST_POSTGRES_DSN")
    if dsn:
        yield dsn
        return
    bindir = _pg_bin()
    if bindir is None:
        pytest.skip("no PostgreSQL: apt-get install postgresql, or set "
                    "RLMESH_STREAM_TEST_POSTGRES_DSN")
    root = Path(tempfile.mkdtemp(prefix="rlmesh-pg-"))
    data, sock = root / "data", root / "sock"
    sock.mkdir()
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
        shutil.chown(sock, "postgres")
    port = _free_port()
    subprocess.run(_as_postgres([str(bindir / "initdb"), "-D", str(data), "-U", "postgres",
                                 "-A", "trust", "--no-sync"]),
                   check=True, capture_output=True)
    options = (f"-c listen_addresses=127.0.0.1 -p {port} -k {sock} -c fsync=off "
               "-c synchronous_commit=off -c full_page_writes=off -c max_connections=100")
    subprocess.run(_as_postgres([str(bindir / "pg_ctl"), "-D", str(data), "-o", options,
                                 "-l", str(root / "log"), "-w", "start"]),
                   check=True, capture_output=True)
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(_as_postgres([str(bindir / "pg_ctl"), "-D", str(data), "-m",
                                     "immediate", "-w", "stop"]), capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def postgres_dsn(postgres: str) -> Iterator[str]:
    """A fresh database of its own for one test, dropped afterwards."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    base, _, _ = postgres.rpartition("/")
    yield f"{base}/{name}"
    with psycopg.connect(postgres, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def duckdb_url(tmp_path: Path) -> str:
    return f"duckdb://{tmp_path / 'tables.duckdb'}"


@pytest.fixture(params=["duckdb", pytest.param("postgresql", marks=pytest.mark.postgres)])
def sink_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Each sink kind in turn: a DuckDB file, then a fresh PostgreSQL database."""
    if request.param == "duckdb":
        return f"duckdb://{tmp_path / 'tables.duckdb'}"
    return str(request.getfixturevalue("postgres_dsn"))

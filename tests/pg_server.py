"""A throwaway PostgreSQL server: the tests' own, which a test may also stop and start.

Built from the Debian `postgresql` package's binaries (or any `initdb` on PATH): initdb
into a temporary directory, run as the `postgres` OS user when the tests run as root
(PostgreSQL refuses to run as root), listening on 127.0.0.1 and a free port with its
socket in the same directory. `stop` and `start` keep the data directory and the port,
so a stop and start is what a server restart is to its clients. Durability is off
(`fsync`, `synchronous_commit`, `full_page_writes`): a test's server never outlives a
crash, and commits stay cheap on a loaded machine; a clean stop (`fast`) writes
everything committed.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from rlmesh_stream.infra.proc import free_port


def pg_bin() -> Path | None:
    """The folder of PostgreSQL's server binaries, if installed."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def _as_postgres(cmd: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


class ThrowawayPostgres:
    """One server in its own temporary directory (`remove` deletes it all)."""

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.root = Path(tempfile.mkdtemp(prefix="rlmesh-pg-"))
        self.data, self.sock = self.root / "data", self.root / "sock"
        self.port = free_port()
        self.sock.mkdir()
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres")
            shutil.chown(self.sock, "postgres")
        subprocess.run(_as_postgres([str(bindir / "initdb"), "-D", str(self.data), "-U",
                                     "postgres", "-A", "trust", "--no-sync"]),
                       check=True, capture_output=True)

    @property
    def dsn(self) -> str:
        """The `postgres` database's URL."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def start(self) -> None:
        """Start the server and wait until it accepts connections."""
        options = (f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.sock} "
                   "-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
                   "-c max_connections=100")
        subprocess.run(_as_postgres([str(self.bindir / "pg_ctl"), "-D", str(self.data), "-o",
                                     options, "-l", str(self.root / "log"), "-w", "start"]),
                       check=True, capture_output=True)

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (`fast`: roll back open transactions, disconnect every client,
        write what is committed; `immediate`: as a crash) and wait until it is down."""
        subprocess.run(_as_postgres([str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m",
                                     mode, "-w", "stop"]), capture_output=True, check=False)

    def remove(self) -> None:
        """Stop the server at once and delete its directory."""
        if self.data.exists():
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)

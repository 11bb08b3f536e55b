"""Process and port helpers for servers that outlive the command that started them.

Servers are started in their own session so `rlmesh-stream infra up` can exit while
they run, and so a Ctrl-C in the terminal that ran `up` does not kill them. A pid
alone is not proof of ownership (pids are reused), so `owns()` also checks that the
process's command line mentions the stack's home directory: `down` must stop what
`up` started and nothing else.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from infra.errors import PortInUseError


def spawn_detached(
    cmd: Sequence[str], cwd: Path, log_file: Path, env: Mapping[str, str] | None = None
) -> int:
    """Start `cmd` in a new session with stdout/stderr appended to `log_file`; return its pid."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "ab") as log:
        proc = subprocess.Popen(
            list(cmd), cwd=cwd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, env=dict(env) if env is not None else None,
        )
    # Nobody waits on the child once this process exits; until then, poll() reaps it.
    _CHILDREN[proc.pid] = proc
    return proc.pid


_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


def is_alive(pid: int) -> bool:
    child = _CHILDREN.get(pid)
    if child is not None and child.poll() is not None:
        return False  # our own child that exited (a zombie until reaped)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return _state(pid) not in {"Z", "X"}


def _state(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "?"
    return stat.rsplit(")", 1)[-1].split()[0]


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def owns(pid: int | None, marker: str) -> bool:
    """True if `pid` is alive and its command line contains `marker` (the stack home)."""
    return pid is not None and is_alive(pid) and marker in cmdline(pid)


def rss_mib(pid: int) -> float | None:
    """Resident memory of a process in MiB (from /proc), or None if unknown."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def stop(pid: int, timeout: float = 30.0) -> None:
    """SIGTERM the process's group, wait for a clean shutdown, then SIGKILL."""
    _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not is_alive(pid):
            break
        time.sleep(0.2)
    else:
        _signal(pid, signal.SIGKILL)
        while is_alive(pid) and time.monotonic() < deadline + 10:
            time.sleep(0.1)
    child = _CHILDREN.pop(pid, None)
    if child is not None:
        child.wait(timeout=5)


def _signal(pid: int, sig: signal.Signals) -> None:
    """Signal the process group `pid` leads (our servers do), else the process alone."""
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def check_port_free(port: int, what: str, option: str, host: str = "127.0.0.1") -> None:
    """Raise PortInUseError unless `host:port` can be bound."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        # Like the servers themselves: lingering TIME_WAIT connections do not count.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
            raise PortInUseError(
                f"port {port} ({what}) on {host} is already in use by another process; "
                f"stop that process or choose another port with {option}."
            ) from None


def port_open(port: int, host: str = "127.0.0.1", timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False

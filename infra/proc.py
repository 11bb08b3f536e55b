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
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from rlmesh_stream.infra.errors import PortInUseError, StartupError


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


def wait_ready(what: str, pid: int, log_file: Path, timeout: float, ready: Callable[[], bool],
               *, exited_hint: str = "", timeout_hint: str = "") -> None:
    """Poll `ready()` every 0.5 s until it is true; StartupError if `pid` exits or time runs out.

    The hints are appended to the error messages after the log file's name.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not is_alive(pid):
            raise StartupError(f"{what} (pid {pid}) exited during startup; "
                               f"see {log_file}{exited_hint}.")
        if ready():
            return
        time.sleep(0.5)
    raise StartupError(f"{what} (pid {pid}) did not become ready within {timeout:.0f} s; "
                       f"see {log_file}{timeout_hint}.")


class HomeState:
    """Servers started under one home directory, with their pids and ports in a JSON file there.

    A mixin of LocalStack and LocalCluster: they set `home` and name the file.
    """

    home: Path
    STATE_FILE: ClassVar[str]

    @property
    def state_file(self) -> Path:
        return self.home / self.STATE_FILE

    @property
    def marker(self) -> str:
        """A string only the command lines of servers started under this home contain."""
        return f"{self.home}/"

    def _load_state(self) -> dict[str, Any]:
        try:
            data: dict[str, Any] = json.loads(self.state_file.read_text())
            return data
        except (OSError, ValueError):
            return {}

    def _save_state(self, state: dict[str, Any]) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2))
        tmp.replace(self.state_file)


def is_alive(pid: int) -> bool:
    child = _CHILDREN.get(pid)
    if child is not None and child.poll() is not None:
        # Our own child, reaped just now: forget it, for the system may give its pid
        # to another process from here on (only this reaping frees the pid).
        del _CHILDREN[pid]
        return False
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
    """True if `pid` is alive and its command line contains `marker` (the stack home).

    A process spawned a moment ago can still show an empty command line while its exec
    completes (seen in 6 of 400 spawns); that is read again for up to a second, or a
    node just started would be taken for one that exited during startup."""
    if pid is None or not is_alive(pid):
        return False
    line = cmdline(pid)
    deadline = time.monotonic() + 1.0
    while not line and time.monotonic() < deadline and is_alive(pid):
        time.sleep(0.01)
        line = cmdline(pid)
    return marker in line


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


def tail(path: Path, lines: int, max_bytes: int = 1 << 20) -> str:
    """The last `lines` lines of a text file (reading at most its last `max_bytes`)."""
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        f.seek(max(0, size - max_bytes))
        data = f.read()
    text = data.decode(errors="replace").splitlines()
    return "\n".join(text[-lines:])


def jvm_thread_dump(pid: int, timeout: float = 20.0, max_lines: int = 300) -> str | None:
    """`jcmd <pid> Thread.print` with the jcmd beside the JVM's own java binary.

    The first `max_lines` lines, or None when there is no such jcmd, it fails or it
    takes longer than `timeout` seconds.
    """
    try:
        jcmd = Path(os.readlink(f"/proc/{pid}/exe")).parent / "jcmd"
    except OSError:
        return None
    if not os.access(jcmd, os.X_OK):
        return None
    try:
        done = subprocess.run([str(jcmd), str(pid), "Thread.print"], capture_output=True,
                              text=True, errors="replace", timeout=timeout, check=False,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0 or not done.stdout.strip():
        return None
    out = done.stdout.splitlines()
    if len(out) > max_lines:
        out = [*out[:max_lines], f"... ({len(out) - max_lines} more lines)"]
    return "\n".join(out)

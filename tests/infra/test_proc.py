"""Process helpers: `down` may only stop what it can prove it started, and must stop it."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlmesh_stream.infra import proc
from rlmesh_stream.infra.errors import StartupError


def test_stop_ends_a_process_that_leads_no_process_group() -> None:
    child = subprocess.Popen(["sleep", "60"])  # same group as pytest: killpg must not be used
    proc.stop(child.pid, timeout=10)
    assert child.wait(timeout=5) is not None


def test_stop_ends_a_detached_server_and_its_group(tmp_path: Path) -> None:
    pid = proc.spawn_detached(["sh", "-c", "sleep 60 & sleep 60"], tmp_path, tmp_path / "log")
    proc.stop(pid, timeout=10)
    assert not proc.is_alive(pid)


def test_a_reaped_childs_pid_is_judged_afresh_once_the_system_reuses_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pid = proc.spawn_detached(["true"], tmp_path, tmp_path / "log")
    deadline = time.monotonic() + 10
    while proc.is_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not proc.is_alive(pid)
    # The pid is free now; pretend the system gave it to a new, running process.
    monkeypatch.setattr(proc.os, "kill", lambda _pid, _sig: None)
    monkeypatch.setattr(proc, "_state", lambda _pid: "S")
    assert proc.is_alive(pid)


def test_owns_needs_the_marker_in_the_command_line(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", str(tmp_path)])
    try:
        assert proc.owns(child.pid, str(tmp_path))
        assert not proc.owns(child.pid, str(tmp_path / "other-home"))
    finally:
        child.kill()
        child.wait()


def test_owns_reads_again_a_command_line_still_empty_from_the_exec(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", str(tmp_path)])
    real, reads = proc.cmdline, iter(["", ""])  # the exec not done for two reads
    monkeypatch.setattr(proc, "cmdline", lambda pid: next(reads, None) or real(pid))
    try:
        assert proc.owns(child.pid, str(tmp_path))
    finally:
        child.kill()
        child.wait()


def test_wait_ready_returns_once_ready_answers(tmp_path: Path) -> None:
    child = subprocess.Popen(["sleep", "60"])
    answers = [False, False, True]
    asked: list[bool] = []

    def ready() -> bool:
        asked.append(answers[len(asked)])
        return asked[-1]

    try:
        proc.wait_ready("server", child.pid, tmp_path / "log", 10, ready)
    finally:
        child.kill()
        child.wait()
    assert asked == [False, False, True], "asked until the first yes, and not after it"


def test_wait_ready_names_the_log_when_the_process_exits(tmp_path: Path) -> None:
    child = subprocess.Popen(["true"])
    child.wait()
    with pytest.raises(StartupError, match=rf"server \(pid {child.pid}\) exited during startup; "
                       rf"see {tmp_path}/log \(hint\)\.$"):
        proc.wait_ready("server", child.pid, tmp_path / "log", 10, lambda: False,
                        exited_hint=" (hint)")


def test_wait_ready_gives_up_after_its_timeout(tmp_path: Path) -> None:
    child = subprocess.Popen(["sleep", "60"])
    try:
        with pytest.raises(StartupError, match=r"did not become ready within 1 s; "
                           rf"see {tmp_path}/log, then\.$"):
            proc.wait_ready("server", child.pid, tmp_path / "log", 1, lambda: False,
                            timeout_hint=", then")
    finally:
        child.kill()
        child.wait()


class _Home(proc.HomeState):
    STATE_FILE = "state.json"

    def __init__(self, home: Path) -> None:
        self.home = home


def test_home_state_round_trips_and_starts_empty(tmp_path: Path) -> None:
    home = _Home(tmp_path / "new-home")
    assert home._load_state() == {}
    home._save_state({"kafka": {"pid": 1}})
    assert home._load_state() == {"kafka": {"pid": 1}}
    assert home.state_file == tmp_path / "new-home" / "state.json"
    assert home.marker == f"{tmp_path}/new-home/"
    home.state_file.write_text("{not json")
    assert home._load_state() == {}


def test_tail_gives_the_last_lines(tmp_path: Path) -> None:
    log = tmp_path / "log"
    log.write_text("".join(f"line {i}\n" for i in range(1000)))
    assert proc.tail(log, 3) == "line 997\nline 998\nline 999"
    assert proc.tail(log, 3, max_bytes=20).splitlines()[-1] == "line 999"


def test_thread_dump_of_a_process_that_is_no_jvm_is_none() -> None:
    child = subprocess.Popen(["sleep", "60"])
    try:
        assert proc.jvm_thread_dump(child.pid, timeout=5) is None  # no jcmd beside `sleep`
    finally:
        child.kill()
        child.wait()
    assert proc.jvm_thread_dump(child.pid, timeout=5) is None  # gone

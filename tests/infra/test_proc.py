"""Process helpers: `down` may only stop what it can prove it started, and must stop it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from infra import proc


def test_stop_ends_a_process_that_leads_no_process_group() -> None:
    child = subprocess.Popen(["sleep", "60"])  # same group as pytest: killpg must not be used
    proc.stop(child.pid, timeout=10)
    assert child.wait(timeout=5) is not None


def test_stop_ends_a_detached_server_and_its_group(tmp_path: Path) -> None:
    pid = proc.spawn_detached(["sh", "-c", "sleep 60 & sleep 60"], tmp_path, tmp_path / "log")
    proc.stop(pid, timeout=10)
    assert not proc.is_alive(pid)


def test_owns_needs_the_marker_in_the_command_line(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", str(tmp_path)])
    try:
        assert proc.owns(child.pid, str(tmp_path))
        assert not proc.owns(child.pid, str(tmp_path / "other-home"))
    finally:
        child.kill()
        child.wait()

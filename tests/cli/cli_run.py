"""Runs `rlmesh-stream` as a user does, from any folder, on this checkout's code.

`python -m rlmesh_stream.infra.cli` with the repository root first on PYTHONPATH: a run
from a temporary folder (where relative paths of a row land) would otherwise load the
installed package, which may be another checkout's. The environment is this process's
without RLMESH_STREAM_* settings and MLFLOW_TRACKING_URI: each row says all it means.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "rlmesh_stream.infra.cli"]


def environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("RLMESH_STREAM_") and k != "MLFLOW_TRACKING_URI"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env


def run_cli(args: Sequence[str | bytes], *, cwd: Path, timeout: float
            ) -> subprocess.CompletedProcess[str]:
    """The command's outcome, its output decoded (undecodable bytes escaped)."""
    return subprocess.run([*CLI, *args], capture_output=True, cwd=cwd, env=environment(),
                          timeout=timeout, text=True, errors="backslashreplace")

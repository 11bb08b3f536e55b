"""TensorBoard's server and `mlflow server`, started for real, read through their HTTP APIs.

What users open is what the tests read: TensorBoard in its default loader (its Rust
data server; no `--load_fast=false`) answering `/data/plugin/scalars/...`, and an
MLflow tracking server (SQLite backend) answering its REST API. Both bind to
127.0.0.1 on a free port and are stopped by the context managers that start them.
TensorBoard rescans its log directory every `reload_s` seconds (its
`--reload_interval`, default 5 s): the tests and the latency benchmark set 1 s.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from rlmesh_stream.infra.proc import free_port

START_TIMEOUT_S = 120.0  # MLflow's first start migrates its SQLite store (~10-30 s here)


@dataclass(frozen=True)
class Server:
    url: str
    log: Path


def _get(url: str, timeout: float = 10.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return json.loads(resp.read())


def _post(url: str, body: dict[str, Any], timeout: float = 10.0) -> Any:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())


def _bin(name: str) -> str:
    """The console script of this interpreter's environment (the venv's TensorBoard)."""
    here = Path(sys.executable).parent / name
    found = str(here) if here.exists() else shutil.which(name)
    if found is None:
        raise RuntimeError(f"{name} is not installed: pip install 'rlmesh-stream[training-logs]'")
    return found


@contextmanager
def _serving(cmd: list[str], url: str, probe: str, log: Path,
             env: dict[str, str] | None = None) -> Iterator[Server]:
    with open(log, "ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{cmd[0]} exited with {proc.returncode} at start: "
                                   f"{log.read_text(errors='replace')[-2000:]}")
            try:
                with urllib.request.urlopen(url + probe, timeout=2.0):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{cmd[0]} did not answer {url + probe} within "
                                       f"{START_TIMEOUT_S:.0f} s; see {log}") from None
                time.sleep(0.5)
        yield Server(url, log)
    finally:
        os.killpg(proc.pid, 15)  # its own session: the server and any child it started
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()


@contextmanager
def tensorboard_server(logdir: Path, reload_s: float = 1.0) -> Iterator[Server]:
    """`tensorboard --logdir LOGDIR` in its default loader, on 127.0.0.1."""
    port = free_port()
    cmd = [_bin("tensorboard"), "--logdir", str(logdir), "--host", "127.0.0.1",
           "--port", str(port), "--reload_interval", str(reload_s)]
    with _serving(cmd, f"http://127.0.0.1:{port}", "/data/runs",
                  logdir.parent / f"tensorboard-{port}.log") as server:
        yield server


MLFLOW_SERVER_ENV = "RLMESH_STREAM_MLFLOW_SERVER"


def mlflow_command() -> str | None:
    """The `mlflow` that serves: $RLMESH_STREAM_MLFLOW_SERVER (.ci/run makes a venv with the
    full `mlflow`), else this environment's when it can serve; None when neither is there.

    Not the project's venv by default: mlflow-skinny has no server, and the server's imports
    (Flask, pandas, ...) installed beside it make every `import mlflow` import pandas too
    (1.9 s of its 13.6 s at load 23, `python -X importtime`), and the test venv would no
    longer be what `[training-logs]` installs."""
    given = os.environ.get(MLFLOW_SERVER_ENV)
    if given:
        return given
    probe = subprocess.run([sys.executable, "-c", "import flask, flask_cors, mlflow.server"],
                           capture_output=True, check=False)
    return _bin("mlflow") if probe.returncode == 0 else None


@contextmanager
def mlflow_server(root: Path, command: str) -> Iterator[Server]:
    """`mlflow server` (the `command` executable) over a SQLite store in ROOT, on 127.0.0.1
    (one worker)."""
    port = free_port()
    root.mkdir(parents=True, exist_ok=True)
    cmd = [command, "server", "--host", "127.0.0.1", "--port", str(port),
           "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}",
           "--default-artifact-root", str(root / "artifacts"), "--workers", "1"]
    env = {**os.environ, "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2"}
    with _serving(cmd, f"http://127.0.0.1:{port}", "/health",
                  root / f"mlflow-{port}.log", env=env) as server:
        yield server


T = TypeVar("T")


def wait_for(check: Callable[[], T | None], timeout: float, what: str,
             every: float = 0.25) -> T:
    """The first truthy answer of `check`; AssertionError naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        answer = check()
        if answer:
            return answer
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout:.0f} s for {what}; last answer {answer!r}")
        time.sleep(every)


# -- reading them as their UIs do -------------------------------------------------------------


def tensorboard_tags(server: Server) -> dict[str, list[str]]:
    """Run -> scalar tags, from `/data/plugin/scalars/tags`."""
    tags = _get(f"{server.url}/data/plugin/scalars/tags")
    return {run: sorted(by_tag) for run, by_tag in tags.items()}


def tensorboard_scalars(server: Server, run: str, tag: str) -> list[tuple[int, float]]:
    """(step, value) of one run's tag, from `/data/plugin/scalars/scalars`."""
    query = urllib.parse.urlencode({"run": run, "tag": tag})
    try:
        points = _get(f"{server.url}/data/plugin/scalars/scalars?{query}")
    except urllib.error.HTTPError as exc:
        if exc.code in (400, 404):  # not (yet) known to the server
            return []
        raise
    return [(int(step), float(value)) for _wall, step, value in points]


def mlflow_create_run(server: Server, name: str) -> str:
    """A new run in a new experiment, through the REST API; its run id."""
    experiment = _post(f"{server.url}/api/2.0/mlflow/experiments/create",
                       {"name": f"{name}-{time.time_ns()}"})["experiment_id"]
    run = _post(f"{server.url}/api/2.0/mlflow/runs/create",
                {"experiment_id": experiment, "run_name": name,
                 "start_time": int(time.time() * 1000)})
    run_id: str = run["run"]["info"]["run_id"]
    return run_id


def mlflow_log(server: Server, run_id: str, key: str, step: int, value: float) -> None:
    _post(f"{server.url}/api/2.0/mlflow/runs/log-metric",
          {"run_id": run_id, "key": key, "value": value, "step": step,
           "timestamp": int(time.time() * 1000)})


def mlflow_history(server: Server, run_id: str, key: str) -> list[tuple[int, float]]:
    """(step, value) of a metric's whole history, from `metrics/get-history`."""
    query = urllib.parse.urlencode({"run_id": run_id, "metric_key": key, "max_results": 25000})
    history = _get(f"{server.url}/api/2.0/mlflow/metrics/get-history?{query}")
    return sorted((int(m.get("step", 0)), float(m["value"]))
                  for m in history.get("metrics", []))

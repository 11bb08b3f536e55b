"""TensorBoard's server and `mlflow server`, each started once per test run.

Each test writes its runs under `tensorboard_logdir` (a directory of its own below
it) and its metrics into a run of its own on `mlflow`, so one server of each serves
the whole suite.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.analysis.tool_servers import (
    MLFLOW_SERVER_ENV,
    Server,
    mlflow_command,
    mlflow_server,
    tensorboard_server,
)


@pytest.fixture(scope="session")
def tensorboard_logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("tensorboard")


@pytest.fixture(scope="session")
def tensorboard(tensorboard_logdir: Path) -> Iterator[Server]:
    """TensorBoard in its default loader over `tensorboard_logdir` (rescanned every 1 s)."""
    with tensorboard_server(tensorboard_logdir) as server:
        yield server


@pytest.fixture(scope="session")
def mlflow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """`mlflow server` over a SQLite store (skipped when no `mlflow` here can serve)."""
    command = mlflow_command()
    if command is None:
        pytest.skip(f"no mlflow server: set {MLFLOW_SERVER_ENV} to the `mlflow` of a venv "
                    "with the full mlflow (.ci/run makes one)")
    with mlflow_server(tmp_path_factory.mktemp("mlflow-server"), command) as server:
        yield server

"""Fixtures of the consumer tests: each sink kind in turn, a runtime run on a thread.

The PostgreSQL server (`postgres`, `postgres_dsn`) is the run's shared one, in
tests/conftest.py.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rlmesh_stream.consumers.runtime import ConsumerRuntime


@pytest.fixture
def duckdb_url(tmp_path: Path) -> str:
    return f"duckdb://{tmp_path / 'tables.duckdb'}"


@pytest.fixture(params=["duckdb", pytest.param("postgresql", marks=pytest.mark.postgres)])
def sink_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Each sink kind in turn: a DuckDB file, then a fresh PostgreSQL database."""
    if request.param == "duckdb":
        return f"duckdb://{tmp_path / 'tables.duckdb'}"
    return str(request.getfixturevalue("postgres_dsn"))


@pytest.fixture
def runtime_thread() -> Iterator[Callable[[ConsumerRuntime], threading.Thread]]:
    """Start a runtime's `run` on a thread; every one started is stopped and joined at the
    end of the test."""
    started: list[tuple[ConsumerRuntime, threading.Thread]] = []

    def start(runtime: ConsumerRuntime) -> threading.Thread:
        thread = threading.Thread(target=runtime.run, daemon=True)
        thread.start()
        started.append((runtime, thread))
        return thread

    yield start
    for runtime, thread in started:
        runtime.stop()
        thread.join(30)

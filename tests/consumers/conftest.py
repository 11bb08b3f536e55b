"""Fixtures of the consumer tests: each sink kind in turn.

The PostgreSQL server (`postgres`, `postgres_dsn`) is the run's shared one, in
tests/conftest.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def duckdb_url(tmp_path: Path) -> str:
    return f"duckdb://{tmp_path / 'tables.duckdb'}"


@pytest.fixture(params=["duckdb", pytest.param("postgresql", marks=pytest.mark.postgres)])
def sink_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Each sink kind in turn: a DuckDB file, then a fresh PostgreSQL database."""
    if request.param == "duckdb":
        return f"duckdb://{tmp_path / 'tables.duckdb'}"
    return str(request.getfixturevalue("postgres_dsn"))

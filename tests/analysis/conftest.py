"""Fixtures of the analysis tests.

The throwaway PostgreSQL server is the consumers' own fixture, loaded from
their conftest by path rather than copied, so both suites start PostgreSQL the
same way. (A conftest's fixtures are otherwise visible only below its folder.)
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "consumer_test_fixtures", Path(__file__).parent.parent / "consumers" / "conftest.py")
assert _spec is not None and _spec.loader is not None
_fixtures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_fixtures)

postgres = _fixtures.postgres
postgres_dsn = _fixtures.postgres_dsn

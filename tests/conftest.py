"""Fixtures shared by every test: one real stack per test run, a fresh topic prefix per test.

Which stack, in order:
1. the one named by RLMESH_STREAM_BOOTSTRAP and RLMESH_STREAM_REGISTRY_URL, when both
   are set (an existing cluster and registry; nothing is started or stopped);
2. containers via testcontainers, when RLMESH_STREAM_STACK=docker and a Docker engine
   answers;
3. otherwise the local stack (`rlmesh_stream.infra.stack.LocalStack`), started once for
   the whole run in a temporary directory on free loopback ports, and stopped at the end even when
   the run fails or is interrupted.

Tests that use the `stack` fixture (or another that starts Kafka: `KAFKA_FIXTURES`) are
marked `stack` automatically, and those that use a
PostgreSQL server (`postgres`, `postgres_dsn`, `restartable_postgres`) `postgres`, so `make check`
(`pytest -m "not stack and not postgres"`) runs only the tests that need no servers.

When a test fails and the stack is the local one, its report gets the tail of the
registry's and Kafka's logs and a thread dump of the registry (sections at the end of
the failure). At the end of a run with failures, the stack's logs are copied into
the directory named by RLMESH_STREAM_CI_ARTIFACTS, if set (CI machines are thrown
away with their temporary directories). Passing runs get neither.

PostgreSQL: `postgres` is a throwaway server from the Debian `postgresql` package's
binaries, started the first time a test asks for it and stopped at the end of the run
(initdb into a temporary directory, run as the `postgres` OS user when the tests run as
root, since PostgreSQL refuses to run as root), listening on 127.0.0.1 and a free port
with its socket in the same temporary directory (tests/pg_server.py); `postgres_dsn` is a
fresh database of its own for one test. `RLMESH_STREAM_TEST_POSTGRES_DSN` points the tests
at an existing server instead. `restartable_postgres` is a server of one test's own, which
it may stop and start (always a throwaway one).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import uuid
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg
import pytest

from rlmesh_stream.schemas.connection.config import StreamConfig
from tests import loopback
from tests.pg_server import ThrowawayPostgres, pg_bin

if TYPE_CHECKING:
    from rlmesh_stream.infra.stack import LocalStack

ARTIFACTS_ENV = "RLMESH_STREAM_CI_ARTIFACTS"
_LOCAL_STACK: pytest.StashKey[LocalStack] = pytest.StashKey()


@dataclass(frozen=True)
class StackEndpoints:
    bootstrap: str
    registry_url: str


# Fixtures that start Kafka (with or without a registry): a test using one is a `stack` test.
KAFKA_FIXTURES = frozenset({"stack", "throwaway_kafka", "cluster", "cluster_up", "secure_stack"})


# Fixtures that start TensorBoard's server or `mlflow server` (tests/analysis/conftest.py).
TOOL_FIXTURES = frozenset({"tensorboard", "mlflow"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        if KAFKA_FIXTURES.intersection(fixtures):
            item.add_marker(pytest.mark.stack)
        if TOOL_FIXTURES.intersection(fixtures):
            item.add_marker(pytest.mark.tools)
        if {"postgres", "postgres_dsn", "restartable_postgres"} & set(fixtures):
            item.add_marker(pytest.mark.postgres)


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory,
          pytestconfig: pytest.Config) -> Iterator[StackEndpoints]:
    """A running Kafka + schema registry for the whole test run."""
    bootstrap = os.environ.get("RLMESH_STREAM_BOOTSTRAP")
    registry_url = os.environ.get("RLMESH_STREAM_REGISTRY_URL")
    if bootstrap and registry_url:
        yield StackEndpoints(bootstrap, registry_url)
        return

    if os.environ.get("RLMESH_STREAM_STACK") == "docker":
        from rlmesh_stream.infra.docker_stack import docker_engine_answers, docker_stack

        if docker_engine_answers():
            with docker_stack() as (docker_bootstrap, docker_registry_url):
                yield StackEndpoints(docker_bootstrap, docker_registry_url)
            return

    from rlmesh_stream.infra.proc import free_port
    from rlmesh_stream.infra.stack import LocalStack

    local = LocalStack(
        tmp_path_factory.mktemp("stack"), kafka_port=free_port(), registry_port=free_port()
    )
    # Belt and braces: if pytest dies without running fixture teardown, stop the servers
    # when the interpreter exits anyway (down() is idempotent).
    atexit.register(local.down)
    # For the failure diagnostics below. up() bounds its own waits (StartupError after
    # KAFKA_READY_TIMEOUT / REGISTRY_READY_TIMEOUT), so this fixture never hangs here.
    pytestconfig.stash[_LOCAL_STACK] = local
    try:
        info = local.up()
        yield StackEndpoints(info.bootstrap, info.registry_url)
    finally:
        local.down()


@pytest.fixture
def topic_prefix() -> str:
    """A prefix no other test uses, so tests never see each other's data."""
    return f"t{uuid.uuid4().hex[:10]}.rlmesh.runtime"


@pytest.fixture
def stream_config(stack: StackEndpoints, topic_prefix: str) -> Iterator[StreamConfig]:
    """Connection settings for the test stack with this test's own topic prefix; the
    prefix's topics are deleted afterwards, so one broker serves a whole run (every
    partition keeps open files: a long run's thousands of them ran out of descriptors)."""
    yield StreamConfig.from_env(
        env={}, bootstrap=stack.bootstrap, registry_url=stack.registry_url,
        topic_prefix=topic_prefix,
    )
    _delete_topics(stack.bootstrap, topic_prefix)


def _delete_topics(bootstrap: str, prefix: str) -> None:
    """Best effort: a topic left behind costs the broker, never the next test."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    with contextlib.suppress(Exception):
        names = [t for t in admin.list_topics(timeout=5).topics if t.startswith(prefix)]
        for future in (admin.delete_topics(names, operation_timeout=10).values()
                       if names else ()):
            with contextlib.suppress(Exception):
                future.result(timeout=15)


# -- diagnostics of failures on the local stack -----------------------------------------------


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.when == "call" and report.failed:
        local = item.config.stash.get(_LOCAL_STACK, None)
        if local is not None:
            # Diagnostics must never turn into a failure of their own, nor be cut short
            # into one by pytest-timeout's alarm (pytest.fail, not an Exception) firing
            # while jcmd runs.
            with contextlib.suppress(Exception, pytest.fail.Exception):
                report.sections.extend(local.diagnostics())
    return report


def pytest_sessionfinish(session: pytest.Session) -> None:
    """After failures, keep the local stack's logs where CI collects artifacts."""
    target = os.environ.get(ARTIFACTS_ENV)
    local = session.config.stash.get(_LOCAL_STACK, None)
    if not target or local is None or not session.testsfailed:
        return
    with contextlib.suppress(Exception):
        folder = Path(target) / "stack-logs"
        folder.mkdir(parents=True, exist_ok=True)
        for name, path in local.log_files().items():
            with contextlib.suppress(OSError):
                shutil.copyfile(path, folder / f"{name}.log")


# -- PostgreSQL --------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def postgres() -> Iterator[str]:
    """A DSN of a PostgreSQL server for the whole run (the `postgres` database)."""
    dsn = os.environ.get("RLMESH_STREAM_TEST_POSTGRES_DSN")
    if dsn:
        yield dsn
        return
    server = _throwaway_postgres()
    try:
        server.start()
        yield server.dsn
    finally:
        server.remove()
        atexit.unregister(server.remove)


def _throwaway_postgres() -> ThrowawayPostgres:
    """A new server (not started), removed at exit even if pytest skips its teardown; a
    skip when PostgreSQL is not installed."""
    bindir = pg_bin()
    if bindir is None:
        pytest.skip("no PostgreSQL: apt-get install postgresql, or set "
                    "RLMESH_STREAM_TEST_POSTGRES_DSN")
    server = ThrowawayPostgres(bindir)
    atexit.register(server.remove)
    return server


@pytest.fixture
def restartable_postgres() -> Iterator[ThrowawayPostgres]:
    """A PostgreSQL server of this test's own, started, which it may stop and start (a
    server restart); never the shared one, whose other clients would see it go."""
    server = _throwaway_postgres()
    try:
        server.start()
        yield server
    finally:
        server.remove()
        atexit.unregister(server.remove)


@pytest.fixture
def postgres_dsn(postgres: str) -> Iterator[str]:
    """A fresh database of its own for one test, dropped afterwards."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    base, _, _ = postgres.rpartition("/")
    yield f"{base}/{name}"
    with psycopg.connect(postgres, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def closed_port() -> int:
    """A loopback port nothing listens on (connection refused): tests/loopback.py."""
    return loopback.closed_port()


@pytest.fixture
def hung_registry() -> Iterator[str]:
    """A registry URL whose server accepts connections and never answers."""
    with loopback.silent_port() as port:
        yield f"http://127.0.0.1:{port}/apis/ccompat/v7"

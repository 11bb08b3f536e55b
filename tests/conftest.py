"""Fixtures shared by every test: one real stack per test run, a fresh topic prefix per test.

Which stack, in order:
1. the one named by RLMESH_STREAM_BOOTSTRAP and RLMESH_STREAM_REGISTRY_URL, when both
   are set (an existing cluster and registry; nothing is started or stopped);
2. containers via testcontainers, when RLMESH_STREAM_STACK=docker and a Docker engine
   answers;
3. otherwise the local stack (`infra.stack.LocalStack`), started once for the whole run
   in a temporary directory on free loopback ports, and stopped at the end even when
   the run fails or is interrupted.

Tests that use the `stack` fixture are marked `stack` automatically, so
`pytest -m "not stack"` runs only the tests that need no servers.
"""

from __future__ import annotations

import atexit
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from schemas.config import StreamConfig


@dataclass(frozen=True)
class StackEndpoints:
    bootstrap: str
    registry_url: str


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "stack" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.stack)


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StackEndpoints]:
    """A running Kafka + schema registry for the whole test run."""
    bootstrap = os.environ.get("RLMESH_STREAM_BOOTSTRAP")
    registry_url = os.environ.get("RLMESH_STREAM_REGISTRY_URL")
    if bootstrap and registry_url:
        yield StackEndpoints(bootstrap, registry_url)
        return

    if os.environ.get("RLMESH_STREAM_STACK") == "docker":
        from infra.docker_stack import docker_engine_answers, docker_stack

        if docker_engine_answers():
            with docker_stack() as (docker_bootstrap, docker_registry_url):
                yield StackEndpoints(docker_bootstrap, docker_registry_url)
            return

    from infra.proc import free_port
    from infra.stack import LocalStack

    local = LocalStack(
        tmp_path_factory.mktemp("stack"), kafka_port=free_port(), registry_port=free_port()
    )
    # Belt and braces: if pytest dies without running fixture teardown, stop the servers
    # when the interpreter exits anyway (down() is idempotent).
    atexit.register(local.down)
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
def stream_config(stack: StackEndpoints, topic_prefix: str) -> StreamConfig:
    """Connection settings for the test stack with this test's own topic prefix."""
    return StreamConfig.from_env(
        env={}, bootstrap=stack.bootstrap, registry_url=stack.registry_url,
        topic_prefix=topic_prefix,
    )

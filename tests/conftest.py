"""Fixtures shared by every test: one real stack per test run, a fresh topic prefix per test.

The stack is the one named by RLMESH_STREAM_BOOTSTRAP / RLMESH_STREAM_REGISTRY_URL when
both are set; otherwise the local stack is started once for the whole run (infra issue).
"""

from __future__ import annotations

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


@pytest.fixture(scope="session")
def stack() -> Iterator[StackEndpoints]:
    """A running Kafka + schema registry for the whole test run."""
    bootstrap = os.environ.get("RLMESH_STREAM_BOOTSTRAP")
    registry_url = os.environ.get("RLMESH_STREAM_REGISTRY_URL")
    if bootstrap and registry_url:
        yield StackEndpoints(bootstrap, registry_url)
        return
    pytest.skip("no stack: set RLMESH_STREAM_BOOTSTRAP and RLMESH_STREAM_REGISTRY_URL")


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

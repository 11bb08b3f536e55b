"""A secured stack for the security tests: SASL_SSL + SCRAM + ACLs, registry behind nginx.

Started once per run (about a minute) in a temporary directory on free
loopback ports, with fresh random passwords, and always stopped. Needs nginx
(`apt-get install nginx-light`); without it the tests are skipped, saying so.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlmesh_stream.infra.artifacts import Artifacts
from rlmesh_stream.infra.java import find_java
from rlmesh_stream.infra.security import SecureStack, nginx_available
from rlmesh_stream.infra.stack import KAFKA_MIN_JAVA, REGISTRY_MIN_JAVA
from rlmesh_stream.infra.topics import ensure_topics


@pytest.fixture(scope="session")
def secure_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureStack]:
    if not nginx_available():
        pytest.skip("nginx is not installed (apt-get install nginx-light): the registry's "
                    "authenticating proxy cannot run")
    artifacts = Artifacts.from_env()
    artifacts.ensure()
    stack = SecureStack(
        home=Path(tmp_path_factory.mktemp("secure")), kafka_libs=artifacts.kafka_libs,
        registry_dist=artifacts.registry_home,
        kafka_java=find_java(KAFKA_MIN_JAVA, "Kafka"),
        registry_java=find_java(REGISTRY_MIN_JAVA, "Apicurio Registry"),
        topic_prefix=f"sec{uuid.uuid4().hex[:8]}.rlmesh.runtime")
    try:
        stack.start()
        ensure_topics(stack.admin_stream_config(), partitions=2, replication_factor=1)
        yield stack
    finally:
        stack.stop()

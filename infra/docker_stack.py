"""The same stack from containers, for machines that have a Docker engine.

Used by the test fixtures when RLMESH_STREAM_STACK=docker and an engine answers. Not
exercised on our own machines (no engine there); `docker-compose.yml` beside this
file is the equivalent for people.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from rlmesh_stream.infra.artifacts import APICURIO_VERSION
from rlmesh_stream.infra.registry import CCOMPAT_PATH

# testcontainers' KafkaContainer drives the Confluent image's start scripts, so the
# fixture uses Confluent Platform 8.1 (Apache Kafka 4.1) rather than apache/kafka, which
# docker-compose.yml uses.
KAFKA_IMAGE = "confluentinc/cp-kafka:8.1.0"
REGISTRY_IMAGE = f"apicurio/apicurio-registry:{APICURIO_VERSION}"


def docker_engine_answers() -> bool:
    try:
        import docker

        docker.from_env().ping()
    except Exception:
        return False
    return True


@contextmanager
def docker_stack() -> Iterator[tuple[str, str]]:
    """Yield (bootstrap, registry_url) of a Kafka + Apicurio pair of containers."""
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.network import Network
    from testcontainers.core.waiting_utils import wait_for_logs
    from testcontainers.kafka import KafkaContainer

    with Network() as network:
        kafka = KafkaContainer(KAFKA_IMAGE).with_kraft().with_network(network)
        kafka.with_network_aliases("kafka")
        with kafka:
            registry = (
                DockerContainer(REGISTRY_IMAGE)
                .with_network(network)
                .with_env("APICURIO_STORAGE_KIND", "kafkasql")
                .with_env("APICURIO_KAFKASQL_BOOTSTRAP_SERVERS", "kafka:9092")
                .with_exposed_ports(8080)
            )
            with registry:
                wait_for_logs(registry, "started in", timeout=180)
                host = registry.get_container_host_ip()
                port = registry.get_exposed_port(8080)
                yield kafka.get_bootstrap_server(), f"http://{host}:{port}{CCOMPAT_PATH}"

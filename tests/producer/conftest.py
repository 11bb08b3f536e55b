"""Producer test fixtures: hooks on the shared stack, and a throwaway broker for fault tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from rlmesh_stream.infra.topics import ensure_topics
from rlmesh_stream.producer.hooks import KafkaRuntimeHooks
from rlmesh_stream.schemas.connection.config import StreamConfig
from tests.producer.producer_helpers import ThrowawayKafka


@pytest.fixture
def make_hooks(stream_config: StreamConfig) -> Iterator[Callable[..., KafkaRuntimeHooks]]:
    """Build hooks on the test stack with this test's prefix; all are closed at teardown."""
    made: list[KafkaRuntimeHooks] = []

    def make(**overrides: Any) -> KafkaRuntimeHooks:
        overrides.setdefault("install_exit_handlers", False)
        config = overrides.pop("config", stream_config)
        hooks = KafkaRuntimeHooks(config=config, **overrides)
        made.append(hooks)
        return hooks

    yield make
    for hooks in made:
        hooks.close(timeout=5)


@pytest.fixture(scope="module")
def _throwaway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThrowawayKafka]:
    kafka = ThrowawayKafka(tmp_path_factory.mktemp("kafka"))
    kafka.start()
    yield kafka
    kafka.stop()


@pytest.fixture
def throwaway_kafka(_throwaway: ThrowawayKafka) -> ThrowawayKafka:
    """The module's throwaway broker, running at the start of each test."""
    _throwaway.start()
    return _throwaway


@pytest.fixture
def throwaway_config(stack: Any, throwaway_kafka: ThrowawayKafka,
                     topic_prefix: str) -> StreamConfig:
    """The throwaway broker with the shared registry (schemas under this test's prefix).

    The event topics exist before a test stops the broker, as in a deployment where
    `rlmesh-stream topics create` ran first: a topic auto-created at the instant the
    broker comes back can refuse the first produce requests (UNKNOWN_TOPIC_OR_PART).
    """
    config = StreamConfig.from_env(env={}, bootstrap=throwaway_kafka.bootstrap,
                                   registry_url=stack.registry_url, topic_prefix=topic_prefix)
    ensure_topics(config, partitions=3)
    return config

"""Fixtures of the decoder fuzz tests: real framed records of every event type, both formats.

The seeds are what the simulator emits, serialised by the contract's own
`EventSerializer` against the real registry under a fresh topic prefix, so
every mutation the fuzzer makes starts from a value a producer really writes.
"""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient

from rlmesh_stream.producer.simulator import simulate_fleet
from rlmesh_stream.schemas.codec.serde import EventSerializer
from rlmesh_stream.schemas.codec.wire import Format
from rlmesh_stream.schemas.connection.config import StreamConfig
from rlmesh_stream.schemas.contract.topics import EventType
from tests.fuzz.fuzz_seeds import Collector, Seeds


@pytest.fixture(scope="module")
def seeds(stack: Any) -> Seeds:
    import uuid

    config = StreamConfig.from_env(env={}, bootstrap=stack.bootstrap,
                                   registry_url=stack.registry_url,
                                   topic_prefix=f"fz{uuid.uuid4().hex[:8]}.rlmesh.runtime")
    collector = Collector()
    simulate_fleet(collector, sessions=3, lanes=2, episodes=2, seed=7, failure_rate=0.5)
    values: dict[tuple[Format, EventType], bytes] = {}
    for fmt in ("avro", "protobuf"):
        # One client and prefix per format, as two producers would have.
        serializer = EventSerializer(SchemaRegistryClient(config.registry_config()), format=fmt,
                                     topic_prefix=f"{fmt}.{config.topic_prefix}")
        for et, event in collector.first.items():
            values[(fmt, et)] = serializer.serialize(event)
    return Seeds(values, SchemaRegistryClient(config.registry_config()))

"""Avro events round-trip through the real registry in the Confluent wire format."""

from __future__ import annotations

import io

import fastavro
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient

from rlmesh_stream.schemas.codec.serde import EventDecoder, EventEncoder, EventSerializer
from rlmesh_stream.schemas.contract.avro import load_schema
from rlmesh_stream.schemas.contract.topics import EVENT_TYPES, EventType
from tests.contract_samples.examples import example


@pytest.fixture
def registry(stream_config):
    return SchemaRegistryClient(stream_config.registry_config())


@pytest.mark.stack
@pytest.mark.parametrize("event_type", EVENT_TYPES, ids=lambda et: et.value)
def test_every_event_type_round_trips_through_the_registry(registry, stream_config, event_type):
    event = example(event_type)
    serializer = EventSerializer(registry, topic_prefix=stream_config.topic_prefix)
    value = serializer.serialize(event)
    assert EventDecoder(registry).decode(value) == event


@pytest.mark.parametrize("event_type", EVENT_TYPES, ids=lambda et: et.value)
def test_avro_payload_equals_fastavro_output(event_type):
    event = example(event_type)
    ours = EventEncoder("avro").encode(event)
    record = fastavro.schemaless_reader(
        io.BytesIO(ours), fastavro.parse_schema(load_schema(event_type)), None)
    theirs = io.BytesIO()
    fastavro.schemaless_writer(theirs, fastavro.parse_schema(load_schema(event_type)), record)
    assert ours == theirs.getvalue()


@pytest.mark.stack
def test_framed_value_carries_magic_byte_and_registered_schema_id(registry, stream_config):
    serializer = EventSerializer(registry, topic_prefix=stream_config.topic_prefix)
    value = serializer.serialize(example(EventType.LOG))
    schema_id = serializer.registrar.schema_id(EventType.LOG)
    assert value[:5] == b"\x00" + schema_id.to_bytes(4, "big")

"""Protobuf events round-trip through the real registry, framed with message indexes."""

from __future__ import annotations

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient

from rlmesh_stream.schemas.codec.serde import EventDecoder, EventEncoder, EventSerializer
from rlmesh_stream.schemas.contract.topics import EVENT_TYPES, EventType
from tests.contract_samples.examples import example


@pytest.fixture
def registry(stream_config):
    return SchemaRegistryClient(stream_config.registry_config())


@pytest.mark.stack
@pytest.mark.parametrize("event_type", EVENT_TYPES, ids=lambda et: et.value)
def test_every_event_type_round_trips_as_protobuf(registry, stream_config, event_type):
    event = example(event_type)
    serializer = EventSerializer(registry, "protobuf", topic_prefix=stream_config.topic_prefix)
    assert EventDecoder(registry).decode(serializer.serialize(event)) == event


@pytest.mark.stack
def test_one_decoder_reads_avro_and_protobuf_values(registry, stream_config):
    event = example(EventType.STEP_COMPLETED)
    avro = EventSerializer(registry, "avro", topic_prefix=stream_config.topic_prefix + ".a")
    proto = EventSerializer(registry, "protobuf", topic_prefix=stream_config.topic_prefix + ".p")
    decoder = EventDecoder(registry)
    assert [decoder.decode(avro.serialize(event)), decoder.decode(proto.serialize(event))] == [
        event, event]


def test_protobuf_payload_is_the_plain_message_bytes():
    from rlmesh_stream.schemas.registry.proto_defs import message_class

    payload = EventEncoder("protobuf").encode(example(EventType.LOG))
    msg = message_class(EventType.LOG).FromString(payload)
    assert (msg.session_id, msg.message, msg.source) == (
        example(EventType.LOG).session_id, "reset done", "runner")


@pytest.mark.stack
def test_protobuf_frame_has_message_index_zero_after_the_schema_id(registry, stream_config):
    serializer = EventSerializer(registry, "protobuf", topic_prefix=stream_config.topic_prefix)
    value = serializer.serialize(example(EventType.LOG))
    assert value[5] == 0

"""What the decoder says about values it cannot read, and when it says "retry".

Each `DecodeError` names what was wrong; an unreachable registry is a
`RegistryUnavailableError`, which is deliberately not a DecodeError (consumers
retry it and never dead-letter the record).
"""

from __future__ import annotations

import json

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from rlmesh_stream.schemas.codec.serde import EventDecoder, EventSerializer, frame
from rlmesh_stream.schemas.contract.errors import (
    BadMagicByteError,
    CorruptPayloadError,
    DecodeError,
    RegistryUnavailableError,
    UnknownSchemaIdError,
)
from rlmesh_stream.schemas.contract.topics import EventType
from tests.contract_samples.examples import example


@pytest.fixture
def registry(stream_config):
    return SchemaRegistryClient(stream_config.registry_config())


def _value(registry, stream_config, fmt="avro", event_type=EventType.STEP_COMPLETED) -> bytes:
    serializer = EventSerializer(registry, fmt, topic_prefix=stream_config.topic_prefix)
    return serializer.serialize(example(event_type))


def test_a_value_without_the_magic_byte_is_bad_magic():
    decoder = EventDecoder(SchemaRegistryClient({"url": "http://127.0.0.1:9"}))
    with pytest.raises(BadMagicByteError, match="not the Confluent magic byte"):
        decoder.decode(b'{"json": "value"}')


def test_a_value_shorter_than_the_header_is_bad_magic():
    decoder = EventDecoder(SchemaRegistryClient({"url": "http://127.0.0.1:9"}))
    with pytest.raises(BadMagicByteError, match="too short"):
        decoder.decode(b"\x00\x00")


@pytest.mark.stack
def test_an_id_the_registry_does_not_know_is_unknown_schema_id(registry):
    with pytest.raises(UnknownSchemaIdError, match="2000000000 is not in the registry"):
        EventDecoder(registry).decode(frame(2_000_000_000, b"\x00"))


@pytest.mark.stack
def test_an_id_of_a_schema_that_is_no_runtime_event_is_unknown_schema_id(registry,
                                                                        stream_config):
    other = {"type": "record", "name": "Pageview", "namespace": "web",
             "fields": [{"name": "url", "type": "string"}]}
    sid = registry.register_schema(f"{stream_config.topic_prefix}.web-value",
                                   Schema(json.dumps(other), "AVRO"))
    with pytest.raises(UnknownSchemaIdError, match=r"web\.Pageview"):
        EventDecoder(registry).decode(frame(sid, b"\x02a"))


@pytest.mark.stack
@pytest.mark.parametrize("fmt", ["avro", "protobuf"])
def test_a_truncated_payload_is_corrupt(registry, stream_config, fmt):
    value = _value(registry, stream_config, fmt)
    with pytest.raises(CorruptPayloadError, match="StepCompletedEvent"):
        EventDecoder(registry).decode(value[:-7])


@pytest.mark.stack
def test_trailing_bytes_after_an_avro_record_are_corrupt(registry, stream_config):
    value = _value(registry, stream_config)
    with pytest.raises(CorruptPayloadError, match="trailing bytes"):
        EventDecoder(registry).decode(value + b"\x00")


@pytest.mark.stack
def test_a_protobuf_message_index_that_is_no_event_is_unknown_schema_id(registry,
                                                                         stream_config):
    value = _value(registry, stream_config, "protobuf")
    with pytest.raises(UnknownSchemaIdError, match="message index"):
        EventDecoder(registry).decode(value[:5] + b"\x02\x06" + value[6:])


def test_an_unreachable_registry_is_retryable_not_a_decode_error():
    decoder = EventDecoder(SchemaRegistryClient({"url": "http://127.0.0.1:9"}))
    with pytest.raises(RegistryUnavailableError) as info:
        decoder.decode(frame(1, b""))
    assert not isinstance(info.value, DecodeError)


@pytest.mark.stack
def test_decoded_schemas_are_cached_so_a_registry_outage_does_not_stop_decoding(
        registry, stream_config):
    value = _value(registry, stream_config)
    decoder = EventDecoder(registry)
    decoder.decode(value)
    decoder.client = SchemaRegistryClient({"url": "http://127.0.0.1:9"})  # registry gone
    assert decoder.decode(value) == example(EventType.STEP_COMPLETED)


@pytest.mark.stack
def test_our_own_schema_decodes_on_the_generated_fast_path(registry, stream_config):
    from rlmesh_stream.schemas.codec.avro_reader import AvroReader

    value = _value(registry, stream_config)
    writer = json.loads(registry.get_schema(int.from_bytes(value[1:5], "big")).schema_str)
    assert AvroReader(EventType.STEP_COMPLETED, writer)._fast is not None


def test_registry_unavailable_on_registration_is_retryable():
    from rlmesh_stream.schemas.registry.registrar import SchemaRegistrar

    registrar = SchemaRegistrar(SchemaRegistryClient({"url": "http://127.0.0.1:9"}))
    with pytest.raises(RegistryUnavailableError):
        registrar.schema_id(EventType.LOG)


@pytest.mark.stack
def test_lookup_with_registration_off_and_no_schema_is_not_registered(registry, stream_config):
    from rlmesh_stream.schemas.contract.errors import SchemaNotRegisteredError
    from rlmesh_stream.schemas.registry.registrar import SchemaRegistrar

    registrar = SchemaRegistrar(registry, topic_prefix=stream_config.topic_prefix,
                                auto_register=False)
    with pytest.raises(SchemaNotRegisteredError, match="schemas register"):
        registrar.schema_id(EventType.LOG)


@pytest.mark.stack
@pytest.mark.parametrize("fmt", ["avro", "protobuf"])
def test_lookup_with_registration_off_finds_the_registered_id(registry, stream_config, fmt):
    from rlmesh_stream.schemas.registry.registrar import SchemaRegistrar

    registered = SchemaRegistrar(registry, fmt, stream_config.topic_prefix).schema_id(
        EventType.LOG)
    looked_up = SchemaRegistrar(registry, fmt, stream_config.topic_prefix,
                                auto_register=False).schema_id(EventType.LOG)
    assert looked_up == registered


@pytest.mark.stack
def test_registering_protobuf_on_an_avro_subject_is_a_format_error(registry, stream_config):
    from rlmesh_stream.schemas.contract.errors import SubjectFormatError
    from rlmesh_stream.schemas.registry.registrar import SchemaRegistrar

    SchemaRegistrar(registry, "avro", stream_config.topic_prefix).schema_id(EventType.LOG)
    with pytest.raises(SubjectFormatError, match="holds AVRO schemas"):
        SchemaRegistrar(registry, "protobuf", stream_config.topic_prefix).schema_id(EventType.LOG)


def test_a_huge_array_count_is_corrupt_without_allocating_it():
    import struct

    from rlmesh_stream.schemas.codec.avro_reader import AvroReader
    from rlmesh_stream.schemas.codec.avro_writer import ZZ  # Avro zigzag longs
    from rlmesh_stream.schemas.codec.serde import EventEncoder
    from tests.contract_samples.examples import step_event

    good = EventEncoder().encode(step_event(1))  # rewards = [1.0]
    one_double = b"\x02" + struct.pack("<d", 1.0)  # count 1, then the reward
    assert good.count(one_double) == 1
    forged = good.replace(one_double, ZZ[2**40] + struct.pack("<d", 1.0))
    with pytest.raises(CorruptPayloadError, match="truncated"):
        AvroReader(EventType.STEP_COMPLETED)(forged)


@pytest.mark.stack
def test_an_unknown_id_is_remembered_so_garbage_does_not_hammer_the_registry(registry):
    decoder = EventDecoder(registry)
    with pytest.raises(UnknownSchemaIdError):
        decoder.decode(frame(2_000_000_001, b"\x00"))
    decoder.client = SchemaRegistryClient({"url": "http://127.0.0.1:9"})  # would be unavailable
    with pytest.raises(UnknownSchemaIdError):
        decoder.decode(frame(2_000_000_001, b"\x00"))

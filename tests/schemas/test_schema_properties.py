"""Property tests on the real registry: random valid events round-trip exactly.

Every event type, both wire formats, through `EventSerializer` (registering in
the real registry) and `EventDecoder` (fetching the schema by id). Equality is
bit-exact for floats (`exact`). For Avro the payload must also be exactly what
fastavro writes for the record it decodes to.
"""

from __future__ import annotations

import copy
import dataclasses
import io

import fastavro
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlmesh_stream.schemas.codec.avro_writer import _compile, avro_writer
from rlmesh_stream.schemas.codec.serde import EventDecoder, EventEncoder, EventSerializer
from rlmesh_stream.schemas.contract.avro import load_schema
from rlmesh_stream.schemas.contract.errors import ContractError
from rlmesh_stream.schemas.contract.topics import EVENT_TYPES, EventType
from rlmesh_stream.schemas.contract.validate import MAX_META_DEPTH
from tests.contract_samples.examples import example
from tests.contract_samples.strategies import deep_meta_map, events, exact, space_specs

PROPERTY = settings(max_examples=30, deadline=None, derandomize=False,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])


@pytest.fixture
def registry(stream_config):
    return SchemaRegistryClient(stream_config.registry_config())


@pytest.mark.stack
@pytest.mark.parametrize("fmt", ["avro", "protobuf"])
@pytest.mark.parametrize("event_type", EVENT_TYPES, ids=lambda et: et.value)
def test_random_events_round_trip_exactly(registry, stream_config, event_type, fmt):
    serializer = EventSerializer(registry, fmt, topic_prefix=stream_config.topic_prefix)
    decoder = EventDecoder(registry)

    @PROPERTY
    @given(event=events(event_type))
    def round_trip(event):
        assert exact(decoder.decode(serializer.serialize(event))) == exact(event)

    round_trip()


@pytest.mark.parametrize("event_type", EVENT_TYPES, ids=lambda et: et.value)
def test_avro_payload_is_what_fastavro_writes_for_the_same_record(event_type):
    parsed = fastavro.parse_schema(load_schema(event_type))
    encoder = EventEncoder("avro")

    @PROPERTY
    @given(event=events(event_type))
    def same_bytes(event):
        ours = encoder.encode(event)
        record = fastavro.schemaless_reader(io.BytesIO(ours), parsed, None,
                                            return_record_name=True,
                                            return_record_name_override=True)
        theirs = io.BytesIO()
        fastavro.schemaless_writer(theirs, parsed, record)
        assert ours == theirs.getvalue()

    same_bytes()


@pytest.mark.stack
@pytest.mark.parametrize("fmt", ["avro", "protobuf"])
@pytest.mark.parametrize("kind", ["none", "box", "discrete", "multi_binary", "multi_discrete",
                                  "text", "dict", "tuple"])
def test_every_space_spec_kind_round_trips(registry, stream_config, fmt, kind):
    serializer = EventSerializer(registry, fmt, topic_prefix=stream_config.topic_prefix)
    decoder = EventDecoder(registry)
    base = example(EventType.OBSERVATION_EMITTED)

    @settings(PROPERTY, max_examples=10)
    @given(spec=space_specs(kind=kind))
    def round_trip(spec):
        base.observation_space = spec
        assert exact(decoder.decode(serializer.serialize(base))) == exact(base)

    round_trip()


@pytest.mark.stack
@pytest.mark.parametrize("fmt", ["avro", "protobuf"])
def test_multi_megabyte_leaves_round_trip(registry, stream_config, fmt):
    import random

    rng = random.Random(7)
    big = [rng.randbytes(3 * 1024 * 1024), b"", rng.randbytes(5 * 1024 * 1024 + 3)]
    event = example(EventType.OBSERVATION_EMITTED)
    event.observation, event.raw_observation = big, big[:1]
    serializer = EventSerializer(registry, fmt, topic_prefix=stream_config.topic_prefix)
    decoded = EventDecoder(registry).decode(serializer.serialize(event))
    assert (decoded.observation, decoded.raw_observation) == (big, big[:1])


@pytest.mark.stack
@pytest.mark.parametrize("fmt", ["avro", "protobuf"])
@pytest.mark.parametrize("container", ["dict", "list"])
def test_a_metamap_nested_to_the_contract_limit_round_trips(registry, stream_config, fmt,
                                                             container):
    event = example(EventType.STEP_COMPLETED)
    event.infos = deep_meta_map(MAX_META_DEPTH, container)
    serializer = EventSerializer(registry, fmt, topic_prefix=stream_config.topic_prefix)
    assert EventDecoder(registry).decode(serializer.serialize(event)).infos == event.infos


@pytest.mark.parametrize("fmt", ["avro", "protobuf"])
def test_a_metamap_nested_past_the_limit_is_refused(fmt):
    event = example(EventType.STEP_COMPLETED)
    event.infos = deep_meta_map(MAX_META_DEPTH + 1)
    with pytest.raises(ContractError, match="nested deeper than 32"):
        EventEncoder(fmt).encode(event)


@pytest.mark.stack
@pytest.mark.parametrize("fmt", ["avro", "protobuf"])
def test_nan_payloads_and_signed_zero_round_trip_bit_exactly(registry, stream_config, fmt):
    import struct

    odd = [struct.unpack("<d", struct.pack("<Q", bits))[0] for bits in (
        0x7FF8000000000001, 0xFFF8000000000000, 0x7FF0000000000000, 0xFFF0000000000000,
        0x8000000000000000, 0x0000000000000001)]
    event = example(EventType.STEP_COMPLETED)
    n = len(odd)
    event.rewards, event.terminated = odd, [False] * n
    event.truncated, event.autoreset_roll = [True] * n, [False] * n
    event.predict_ms = odd[0]
    serializer = EventSerializer(registry, fmt, topic_prefix=stream_config.topic_prefix)
    decoded = EventDecoder(registry).decode(serializer.serialize(event))
    assert [struct.pack("<d", x) for x in [*decoded.rewards, decoded.predict_ms]] == [
        struct.pack("<d", x) for x in [*odd, odd[0]]]


def test_non_ascii_text_is_carried_as_utf8():
    event = example(EventType.LOG)
    event.message = "épisode terminé — 終了 🚀"
    assert event.message.encode("utf-8") in EventEncoder("avro").encode(event)




@pytest.mark.parametrize("event_type", EVENT_TYPES, ids=lambda et: et.value)
def test_avro_memos_never_serve_stale_bytes(event_type):
    """The writer's memos (id runs, the last lane flags) across a stream of events, one
    object reused and its lists changed in place as a caller may: every payload is what a
    freshly generated writer (empty memos) and fastavro write for the event as it is now,
    and a framed call is the prefix then those bytes."""
    parsed = fastavro.parse_schema(load_schema(event_type))
    writer = avro_writer(event_type)

    @PROPERTY
    @given(stream=st.lists(events(event_type), min_size=2, max_size=5))
    def same_bytes(stream):
        reused = copy.deepcopy(stream[0])
        for event in stream:
            for f in dataclasses.fields(event):
                value, held = getattr(event, f.name), getattr(reused, f.name)
                if type(value) is list and type(held) is list:
                    held[:] = value  # in place: the memo must not keep the caller's list
                else:
                    setattr(reused, f.name, copy.deepcopy(value))
            ours = writer(reused)
            fresh = _compile(event_type)[0](copy.deepcopy(reused))
            record = fastavro.schemaless_reader(io.BytesIO(fresh), parsed, None,
                                                return_record_name=True,
                                                return_record_name_override=True)
            theirs = io.BytesIO()
            fastavro.schemaless_writer(theirs, parsed, record)
            assert ours == fresh == theirs.getvalue()
            assert writer(reused, b"\x00\x00\x00\x00\x07") == b"\x00\x00\x00\x00\x07" + ours

    same_bytes()

"""Malformed record values never crash or hang the decoder: each is decoded or a DecodeError.

`EventDecoder.decode` is the one function every consumer runs on bytes it did
not produce. The consumer runtime dead-letters a `DecodeError` and retries a
`RegistryUnavailableError`; anything else would kill the consumer process, and
a hang would stall its partitions. So the property, for every input, is:
`decode` returns one of our event dataclasses or raises `DecodeError`, quickly.
"""

from __future__ import annotations

import os
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlmesh_stream.schemas.codec.serde import EventDecoder
from rlmesh_stream.schemas.contract.errors import DecodeError, UnknownSchemaIdError
from rlmesh_stream.schemas.contract.topics import EVENT_TYPES
from tests.contract_samples.hostile import long_varint, varint
from tests.fuzz.fuzz_seeds import Seeds

pytestmark = pytest.mark.timeout(300)

EXAMPLES = int(os.environ.get("RLMESH_STREAM_FUZZ_EXAMPLES", "400"))
FUZZ = settings(max_examples=EXAMPLES, deadline=2000,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])
EVENT_CLASSES = tuple(et.event_class for et in EVENT_TYPES)


def decoded_or_rejected(decoder: EventDecoder, value: bytes) -> str:
    """'decoded' or 'rejected'; any other exception propagates and fails the test."""
    try:
        event = decoder.decode(value)
    except DecodeError:
        return "rejected"
    assert isinstance(event, EVENT_CLASSES), f"decode returned {type(event).__name__}"
    return "decoded"


@pytest.fixture(scope="module")
def decoder(seeds: Seeds) -> EventDecoder:
    """One decoder for the module, as a consumer has: its schema cache warms up as it goes."""
    return seeds.decoder()


def test_every_seed_decodes(seeds: Seeds, decoder: EventDecoder) -> None:
    for (fmt, et), value in seeds.values.items():
        assert isinstance(decoder.decode(value), et.event_class), (fmt, et)


@FUZZ
@given(value=st.binary(max_size=4096))
def test_random_bytes_are_decoded_or_rejected(decoder: EventDecoder, value: bytes) -> None:
    decoded_or_rejected(decoder, value)


@FUZZ
@given(data=st.data())
def test_random_payloads_under_a_known_schema_id_are_decoded_or_rejected(
    seeds: Seeds, decoder: EventDecoder, data: st.DataObject,
) -> None:
    seed = data.draw(st.sampled_from([v for _, v in seeds.items]))
    payload = data.draw(st.binary(max_size=2048))
    decoded_or_rejected(decoder, seed[:5] + payload)


@FUZZ
@given(data=st.data())
def test_truncated_records_are_decoded_or_rejected(
    seeds: Seeds, decoder: EventDecoder, data: st.DataObject,
) -> None:
    key = data.draw(st.sampled_from(seeds.keys))
    value = seeds.values[key]
    cut = data.draw(st.integers(0, len(value) - 1))
    outcome = decoded_or_rejected(decoder, value[:cut])
    if key[0] == "avro":  # an Avro prefix never holds a whole record: it must be rejected
        assert outcome == "rejected"


@FUZZ
@given(data=st.data())
def test_mutated_records_are_decoded_or_rejected(
    seeds: Seeds, decoder: EventDecoder, data: st.DataObject,
) -> None:
    value = bytearray(data.draw(st.sampled_from([v for _, v in seeds.items])))
    for _ in range(data.draw(st.integers(1, 8))):
        at = data.draw(st.integers(5, len(value) - 1))
        value[at] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        at = data.draw(st.integers(5, len(value)))
        value[at:at] = data.draw(st.binary(min_size=1, max_size=16))
    decoded_or_rejected(decoder, bytes(value))


@FUZZ
@given(data=st.data())
def test_wrong_and_huge_lengths_are_rejected_without_allocating_them(
    seeds: Seeds, decoder: EventDecoder, data: st.DataObject,
) -> None:
    """A length prefix (Avro string/bytes/array/map, protobuf field) larger than the record."""
    (fmt, _), value = data.draw(st.sampled_from(seeds.items))
    length = data.draw(st.one_of(st.integers(2**20, 2**62), st.integers(-(2**62), -1)))
    if fmt == "avro":
        at = data.draw(st.integers(5, len(value)))
        bad = value[:at] + long_varint(length) + value[at:]
    else:
        at = data.draw(st.integers(6, len(value)))  # after the message-index byte
        field = data.draw(st.integers(1, 30))
        bad = value[:at] + varint(field << 3 | 2) + varint(abs(length)) + value[at:]
    decoded_or_rejected(decoder, bad)


@settings(max_examples=min(EXAMPLES, 40), deadline=5000,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_unknown_schema_ids_are_rejected_as_unknown(
    seeds: Seeds, decoder: EventDecoder, data: st.DataObject,
) -> None:
    sid = data.draw(st.integers(max(seeds.known_ids) + 10_000, 2**31 - 1))
    payload = data.draw(st.sampled_from([v for _, v in seeds.items]))[5:]
    with pytest.raises(UnknownSchemaIdError):
        decoder.decode(struct.pack(">bI", 0, sid) + payload)


@FUZZ
@given(data=st.data())
def test_a_payload_under_the_other_formats_schema_id_is_decoded_or_rejected(
    seeds: Seeds, decoder: EventDecoder, data: st.DataObject,
) -> None:
    (fmt, _), value = data.draw(st.sampled_from(seeds.items))
    other = "protobuf" if fmt == "avro" else "avro"
    target = data.draw(st.sampled_from([k for k in seeds.keys if k[0] == other]))
    decoded_or_rejected(decoder, seeds.values[target][:5] + value[5:])


def test_a_null_value_is_rejected(decoder: EventDecoder) -> None:
    with pytest.raises(DecodeError):
        decoder.decode(None)  # type: ignore[arg-type]

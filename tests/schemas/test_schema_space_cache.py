"""SpaceSpec encodings are cached (spec section 7: encode a space once per distinct spec)."""

from __future__ import annotations

from contract_samples.examples import box_space, example

from rlmesh_stream.schemas.codec.avro_writer import pin_space_spec
from rlmesh_stream.schemas.codec.serde import EventEncoder
from rlmesh_stream.schemas.contract.topics import EventType


def _encode_with(spec) -> bytes:
    event = example(EventType.OBSERVATION_EMITTED)
    event.observation_space = spec
    return EventEncoder().encode(event)


def test_a_pinned_spec_encodes_to_the_same_bytes_as_an_unpinned_equal_spec():
    assert _encode_with(pin_space_spec(box_space())) == _encode_with(box_space())


def test_an_unpinned_spec_mutated_between_events_is_encoded_afresh():
    spec = box_space()
    before = _encode_with(spec)
    spec.shape[0] = 8
    after = _encode_with(spec)
    fresh = box_space()
    fresh.shape[0] = 8
    assert (after != before, after) == (True, _encode_with(fresh))

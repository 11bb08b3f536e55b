"""SpaceSpec encodings are cached (runtime-events.md §7: encode a space once per distinct spec)."""

from __future__ import annotations

from rlmesh_stream.schemas.codec.avro_writer import pin_space_spec
from rlmesh_stream.schemas.codec.serde import EventEncoder
from rlmesh_stream.schemas.contract.topics import EventType
from tests.contract_samples.examples import box_space, discrete_space, example


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


def _decoded_spaces(*specs) -> list:
    """Each spec in an observation event of its own, encoded, then decoded by the generated
    reader (which remembers the SpaceSpec encodings it has read)."""
    from rlmesh_stream.schemas.codec.avro_fastread import compile_reader

    read = compile_reader(EventType.OBSERVATION_EMITTED)[0]
    out = []
    for spec in specs:
        payload = _encode_with(spec)
        event, end = read(payload, 0)
        assert end == len(payload)
        out.append(event)
    return out


def test_a_remembered_space_spec_decodes_as_it_was_written():
    wider = box_space()
    wider.shape[0] = 8
    specs = [box_space(), wider, box_space(), wider, discrete_space(), box_space()]
    events = _decoded_spaces(*specs)
    assert [e.observation_space for e in events] == specs
    assert {e.observation == example(EventType.OBSERVATION_EMITTED).observation
            for e in events} == {True}  # the fields after the spec read from its end


def test_a_decoded_space_spec_is_the_callers_own():
    first, = _decoded_spaces(box_space())
    first.observation_space.shape[0] = 99
    again, = _decoded_spaces(box_space())
    assert again.observation_space == box_space()

"""Values read as one array per episode (`LaneValues.stacked` for a vector session,
`LeafDecoder.decode_stacked` for single-lane events) are the values read one by one, and
the stacked read stands aside for what it cannot read whole (several leaves, text, a
value or slab of the wrong size)."""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces as gs

from rlmesh_stream.consumers.datasets.groups import GroupObservation, GroupSession, LaneValues
from rlmesh_stream.producer.leaves import LeafCodec
from rlmesh_stream.schemas.codec.leaves import LeafDecoder

LANES = 3


def _session(space: Any, groups: int) -> tuple[GroupSession, list[list[Any]]]:
    """A session of `groups` group observations of `space`; the values per group and lane."""
    codec = LeafCodec(space)
    spec = codec.spec.SerializeToString(deterministic=True)
    session = GroupSession(LANES)
    values = []
    for k in range(groups):
        lanes = [space.sample() for _ in range(LANES)]
        values.append(lanes)
        session.observations[k] = GroupObservation(
            [f"ep-{lane}" for lane in range(LANES)], codec.encode_lanes(lanes), spec)
    return session, values


def test_stacked_lane_values_are_the_values_read_one_by_one() -> None:
    for space in (gs.Box(-1.0, 1.0, (2, 3), np.float32), gs.Discrete(5),
                  gs.MultiBinary(4), gs.Box(0, 9, (3,), np.int16)):
        session, _ = _session(space, 6)
        values = LaneValues(session)
        groups = [0, 2, 3, 5]
        stacked = values.stacked("obs", groups, 1)
        one_by_one = np.stack([values.observation(k, 1) for k in groups])
        assert stacked is not None
        assert (stacked.dtype, stacked.shape) == (one_by_one.dtype, one_by_one.shape)
        assert stacked.tobytes() == one_by_one.tobytes()


def test_a_space_of_several_leaves_is_read_value_by_value() -> None:
    space = gs.Dict({"a": gs.Discrete(3), "b": gs.Box(-1.0, 1.0, (2,), np.float32)})
    session, _ = _session(space, 3)
    assert LaneValues(session).stacked("obs", [0, 1], 0) is None


def test_a_slab_of_the_wrong_size_leaves_it_to_the_value_by_value_read() -> None:
    session, _ = _session(gs.Box(-1.0, 1.0, (2,), np.float32), 3)
    session.observations[1].leaves = [session.observations[1].leaves[0][:-1]]
    assert LaneValues(session).stacked("obs", [0, 2], 0) is None


def test_values_of_one_array_leaf_stack_as_decoded_one_by_one() -> None:
    for space in (gs.Box(-1.0, 1.0, (2, 3), np.float32), gs.Discrete(5), gs.MultiBinary(4),
                  gs.MultiDiscrete([3, 4]), gs.Box(0, 9, (3,), np.uint16)):
        codec = LeafCodec(space)
        decoder = LeafDecoder(codec.spec)
        values = [codec.encode(space.sample()) for _ in range(5)]
        stacked = decoder.decode_stacked(values)
        one_by_one = np.stack([decoder.decode(v) for v in values])
        assert stacked is not None
        assert (stacked.dtype, stacked.shape) == (one_by_one.dtype, one_by_one.shape)
        assert stacked.tobytes() == one_by_one.tobytes()


def test_values_that_do_not_stack_are_left_to_the_one_by_one_decode() -> None:
    nested = LeafCodec(gs.Dict({"a": gs.Discrete(3)}))
    text = LeafCodec(gs.Text(max_length=4))
    box = LeafCodec(gs.Box(-1.0, 1.0, (2,), np.float32))
    short = [box.encode(np.zeros(2, np.float32))[0][:-1]]
    assert LeafDecoder(nested.spec).decode_stacked([nested.encode({"a": 1})]) is None
    assert LeafDecoder(text.spec).decode_stacked([text.encode("ab")]) is None
    assert LeafDecoder(box.spec).decode_stacked([short]) is None

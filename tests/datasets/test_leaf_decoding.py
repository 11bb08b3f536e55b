"""Leaf decoding (schemas.leaves) is the exact inverse of the producer's LeafCodec."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces as gs
from gymnasium.vector.utils import concatenate, create_empty_array
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlmesh_stream.producer.leaves import LeafCodec, space_spec
from rlmesh_stream.schemas.codec.leaves import LeafDecoder, gym_space
from rlmesh_stream.schemas.contract.errors import ContractError

_DTYPES = [np.float16, np.float32, np.float64, np.int8, np.int16, np.int32, np.int64,
           np.uint8, np.uint16, np.uint32, np.uint64]


@st.composite
def _leaf_spaces(draw: st.DrawFn) -> gym.Space[Any]:
    kind = draw(st.sampled_from(["box", "discrete", "multi_discrete", "multi_binary", "text"]))
    shape = tuple(draw(st.lists(st.integers(1, 3), min_size=0, max_size=3)))
    if kind == "box":
        dtype = draw(st.sampled_from(_DTYPES))
        if np.dtype(dtype).kind == "f":
            return gs.Box(-10.0, 10.0, shape=shape, dtype=dtype)
        return gs.Box(0, 100, shape=shape, dtype=dtype)
    if kind == "discrete":
        return gs.Discrete(draw(st.integers(1, 50)), start=draw(st.integers(-5, 5)))
    if kind == "multi_discrete":
        return gs.MultiDiscrete(np.full(shape or (2,), draw(st.integers(2, 9))))
    if kind == "multi_binary":
        return gs.MultiBinary(list(shape or (3,)))
    return gs.Text(max_length=draw(st.integers(1, 8)), min_length=0,
                   charset="abcé漢字 ")


def _spaces(depth: int = 0) -> st.SearchStrategy[gym.Space[Any]]:
    if depth >= 2:
        return _leaf_spaces()
    child = _spaces(depth + 1)
    return st.one_of(
        _leaf_spaces(),
        st.dictionaries(st.text("abcxyz", min_size=1, max_size=4), child, min_size=1,
                        max_size=3).map(gs.Dict),
        st.lists(child, min_size=1, max_size=3).map(lambda s: gs.Tuple(tuple(s))),
    )


def _assert_same(decoded: Any, value: Any) -> None:
    if isinstance(value, dict):
        assert list(decoded) == list(value)
        for key in value:
            _assert_same(decoded[key], value[key])
    elif isinstance(value, tuple):
        assert isinstance(decoded, tuple) and len(decoded) == len(value)
        for d, v in zip(decoded, value, strict=True):
            _assert_same(d, v)
    elif isinstance(value, (str, list)):
        assert decoded == value
    else:
        expected = np.asarray(value)
        got = np.asarray(decoded)
        assert got.shape == expected.shape
        assert got.tobytes() == expected.astype(got.dtype).tobytes()


_settings = settings(max_examples=150, deadline=None,
                     suppress_health_check=[HealthCheck.too_slow])


@_settings
@given(space=_spaces(), seed=st.integers(0, 2**31))
def test_decoding_a_codecs_bytes_gives_back_the_value(space: gym.Space[Any], seed: int) -> None:
    space.seed(seed)
    value = space.sample()
    codec = LeafCodec(space)

    decoded = LeafDecoder(codec.spec).decode(codec.encode(value))

    _assert_same(decoded, value)


@_settings
@given(space=_spaces(), seed=st.integers(0, 2**31), lanes=st.integers(1, 4))
def test_decoding_an_n_lane_slab_gives_back_each_lanes_value(
    space: gym.Space[Any], seed: int, lanes: int,
) -> None:
    space.seed(seed)
    values = [space.sample() for _ in range(lanes)]
    batched = concatenate(space, values, create_empty_array(space, lanes))
    slab = LeafCodec(space, batched=True).encode(batched)
    decoder = LeafDecoder(LeafCodec(space).spec)

    batch = decoder.decode_batch(slab, lanes)

    for lane, value in enumerate(values):
        _assert_same(_row(batch, lane), value)
    for got, value in zip(decoder.decode_lanes(slab, lanes), values, strict=True):
        _assert_same(got, value)


def _row(batch: Any, lane: int) -> Any:
    """Lane `lane` of a decoded batch: (N, *shape) arrays and lists of N strings, nested."""
    if isinstance(batch, dict):
        return {k: _row(v, lane) for k, v in batch.items()}
    if isinstance(batch, tuple):
        return tuple(_row(v, lane) for v in batch)
    return batch[lane]


@_settings
@given(space=_spaces())
def test_the_gymnasium_space_of_a_spec_has_that_spec(space: gym.Space[Any]) -> None:
    spec = space_spec(space)

    assert space_spec(gym_space(spec)) == spec


def _payload(space: gym.Space[Any]) -> tuple[LeafDecoder, list[bytes]]:
    space.seed(0)
    codec = LeafCodec(space)
    return LeafDecoder(codec.spec), codec.encode(space.sample())


def test_a_leaf_one_byte_short_is_a_contract_error_naming_the_leaf() -> None:
    decoder, leaves = _payload(gs.Dict({"pos": gs.Box(-1, 1, (3,), np.float32)}))

    with pytest.raises(ContractError, match=r"pos.*12 bytes"):
        decoder.decode([leaves[0][:-1]])


def test_a_payload_with_a_missing_leaf_is_a_contract_error() -> None:
    decoder, leaves = _payload(gs.Tuple((gs.Discrete(3), gs.Discrete(4))))

    with pytest.raises(ContractError, match="the SpaceSpec has 2 leaves"):
        decoder.decode(leaves[:1])


def test_text_that_is_not_utf8_is_a_contract_error() -> None:
    decoder, _ = _payload(gs.Text(5))

    with pytest.raises(ContractError, match="not UTF-8"):
        decoder.decode([b"\xff\xfe"])


def test_a_text_slab_counting_other_lanes_than_the_event_is_a_contract_error() -> None:
    decoder, _ = _payload(gs.Text(5))
    slab = LeafCodec(gs.Text(5), batched=True).encode(["ab", "c"])

    with pytest.raises(ContractError, match="counts 2 strings, the event has 3 lanes"):
        decoder.decode_lanes(slab, 3)


def test_lanes_come_from_the_caller_so_a_slab_of_another_size_is_refused() -> None:
    decoder, leaves = _payload(gs.Box(-1, 1, (2,), np.float64))

    with pytest.raises(ContractError, match=r"shape \(3, 2\)"):
        decoder.decode_batch(leaves * 1, 3)

"""Leaf bytes per runtime-events.md §7 and SpaceSpecs from Gymnasium spaces."""

from __future__ import annotations

import struct
from collections import OrderedDict

import numpy as np
from gymnasium import spaces as gs

from rlmesh_stream.producer.leaves import LeafCodec, space_spec
from rlmesh_stream.schemas.contract._pb.rlmesh.spaces.v1 import spaces_pb2 as pb


def test_a_box_leaf_is_its_elements_little_endian_at_the_dtype_width():
    codec = LeafCodec(gs.Box(-1.0, 1.0, shape=(2, 2), dtype=np.float64))
    value = np.array([[1.5, -2.0], [0.25, 3.0]])

    assert codec.encode(value) == [value.astype("<f8").tobytes()]


def test_a_discrete_leaf_is_encoded_at_the_declared_dtype():
    assert LeafCodec(gs.Discrete(5)).encode(3) == [struct.pack("<q", 3)]


def test_a_multibinary_leaf_is_one_byte_per_element():
    assert LeafCodec(gs.MultiBinary(4)).encode(np.array([1, 0, 1, 1])) == [b"\x01\x00\x01\x01"]


def test_dict_children_are_leaves_in_declared_key_order_and_tuples_in_index_order():
    space = gs.Dict(OrderedDict(  # Gymnasium sorts the keys of a plain dict
        z=gs.Discrete(3), a=gs.Tuple((gs.Box(0, 1, (1,), np.float32), gs.MultiBinary(2)))))
    value = {"a": (np.array([0.5], np.float32), np.array([1, 0])), "z": 2}

    leaves = LeafCodec(space).encode(value)

    assert leaves == [struct.pack("<q", 2), struct.pack("<f", 0.5), b"\x01\x00"]


def test_a_text_leaf_is_raw_utf8_and_a_text_slab_has_a_count_and_lengths_header():
    assert LeafCodec(gs.Text(10)).encode("héllo") == ["héllo".encode()]

    (slab,) = LeafCodec(gs.Text(10), batched=True).encode(["ab", "é"])

    assert slab == struct.pack("<3Q", 2, 2, 2) + b"ab" + "é".encode()


def test_n_lanes_make_the_row_major_slab_of_each_leaf():
    codec = LeafCodec(gs.Box(0, 10, shape=(2,), dtype=np.int32))
    lanes = [np.array([1, 2], np.int32), np.array([3, 4], np.int32)]

    assert codec.encode_lanes(lanes) == [np.array([[1, 2], [3, 4]], "<i4").tobytes()]


def test_an_unbounded_box_spec_says_unbounded():
    spec = space_spec(gs.Box(-np.inf, np.inf, shape=(3,), dtype=np.float32))

    assert spec.box.WhichOneof("bounds") == "unbounded"
    assert list(spec.shape) == [3] and spec.dtype == pb.DATA_TYPE_FLOAT32


def test_a_box_with_equal_bounds_everywhere_has_uniform_scalar_bounds():
    spec = space_spec(gs.Box(0, 255, shape=(2, 2), dtype=np.uint8))

    assert spec.box.uniform.low == b"\x00" and spec.box.uniform.high == b"\xff"


def test_a_box_with_per_element_bounds_has_elementwise_bounds():
    low, high = np.array([-1.0, -2.0], np.float32), np.array([1.0, 2.0], np.float32)

    spec = space_spec(gs.Box(low, high, dtype=np.float32))

    assert spec.box.elementwise.low == low.tobytes()
    assert spec.box.elementwise.high == high.tobytes()


def test_composite_specs_nest_with_keys_in_declared_order():
    spec = space_spec(gs.Dict(OrderedDict(b=gs.Discrete(4, start=1),
                                          a=gs.MultiDiscrete([2, 3]))))

    assert list(spec.dict.keys) == ["b", "a"]
    assert (spec.dict.spaces[0].discrete.n, spec.dict.spaces[0].discrete.start) == (4, 1)
    assert list(spec.dict.spaces[1].multi_discrete.nvec) == [2, 3]


def test_the_spec_is_built_once_per_codec_and_reused():
    codec = LeafCodec(gs.Discrete(2))

    assert codec.spec is codec.spec
    assert codec.spec.discrete.n == 2

"""Native arrays -> rlmesh leaf bytes (runtime-events.md §7), and Gymnasium spaces -> `SpaceSpec`.

A payload is one bytes entry per fundamental leaf of the space, in canonical
pre-order (Dict children in declared key order, Tuple in index order). A
leaf holds its raw elements little-endian at the leaf's dtype width;
Discrete at the declared dtype, MultiBinary one byte per element, Text raw
UTF-8. A batch of N lanes holds the row-major (N, *shape) slab per leaf; a
Text slab is a u64 count, a u64 byte length per string, then the bodies.

`LeafCodec` compiles a space once into a list of per-leaf encoders so the
per-step cost is a few numpy calls, and builds the space's `SpaceSpec` once.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from rlmesh_stream.schemas.codec.avro_writer import pin_space_spec
from rlmesh_stream.schemas.codec.leaves import DTYPES
from rlmesh_stream.schemas.contract._pb.rlmesh.spaces.v1 import spaces_pb2 as pb
from rlmesh_stream.schemas.contract.events import SpaceSpec

# numpy dtype name -> DataType, from the contract's table (schemas.leaves, the decoding side).
_DTYPES: dict[str, int] = {dtype.name: code for code, dtype in DTYPES.items()}

LeafEncoder = Callable[[Any], bytes]


def data_type(dtype: Any) -> int:
    """The `DataType` enum value of a numpy dtype."""
    name = np.dtype(dtype).name
    try:
        return _DTYPES[name]
    except KeyError:
        raise ValueError(f"dtype {name} has no rlmesh DataType") from None


def _array_leaf(dtype: np.dtype[Any]) -> LeafEncoder:
    le = dtype.newbyteorder("<")
    ndarray = np.ndarray
    # Fast paths, same bytes: an array (or numpy scalar) already of the leaf's little-endian
    # dtype is dumped as is (`tobytes` is C order, as `asarray(...).tobytes()`), and a plain
    # Python int for a 64-bit integer leaf is packed by `struct` (out of range falls back to
    # numpy, which raises its usual error).
    pack = (struct.Struct("<q").pack if le == np.dtype("<i8")
            else struct.Struct("<Q").pack if le == np.dtype("<u8") else None)
    scalar = le.type  # numpy's scalar type of the dtype (np.float32, np.int64, ...)

    def encode(value: Any) -> bytes:
        t = type(value)
        if (t is ndarray or t is scalar) and value.dtype == le:
            return value.tobytes()
        if pack is not None and type(value) is int:
            try:
                return pack(value)
            except struct.error:
                pass
        return np.asarray(value, dtype=le).tobytes()

    return encode


def _text_leaf(batched: bool) -> LeafEncoder:
    def encode(value: Any) -> bytes:
        if not batched:
            return str(value).encode("utf-8")
        bodies = [str(v).encode("utf-8") for v in value]
        head = struct.pack(f"<{len(bodies) + 1}Q", len(bodies), *(len(b) for b in bodies))
        return head + b"".join(bodies)

    return encode


class LeafCodec:
    """One space, compiled: `spec` (built once) and `encode(value) -> list[bytes]`.

    `batched=True` encodes a value holding N lanes (a Gymnasium vector env's
    batched arrays): the same bytes as a row-major (N, *shape) slab.
    """

    def __init__(self, space: Any, *, batched: bool = False) -> None:
        self.space = space
        self.batched = batched
        # Never mutated after this: the contract's Avro writer caches its encoding by identity.
        self.spec: SpaceSpec = pin_space_spec(space_spec(space))
        self._plan: list[tuple[tuple[Any, ...], LeafEncoder]] = []
        self._compile(space, ())
        # A space that is one leaf (Box, Discrete, ...): no path to walk.
        self._single: LeafEncoder | None = (
            self._plan[0][1] if len(self._plan) == 1 and not self._plan[0][0] else None)

    def _compile(self, space: Any, path: tuple[Any, ...]) -> None:
        from gymnasium import spaces as gs

        if isinstance(space, gs.Dict):
            for key, sub in space.spaces.items():
                self._compile(sub, (*path, key))
        elif isinstance(space, gs.Tuple):
            for index, sub in enumerate(space.spaces):
                self._compile(sub, (*path, index))
        elif isinstance(space, gs.Text):
            self._plan.append((path, _text_leaf(self.batched)))
        elif isinstance(space, gs.MultiBinary):
            self._plan.append((path, _array_leaf(np.dtype(np.uint8))))
        elif isinstance(space, (gs.Box, gs.Discrete, gs.MultiDiscrete)):
            self._plan.append((path, _array_leaf(np.dtype(space.dtype))))
        else:
            raise TypeError(f"unsupported space {type(space).__name__}")

    def encode(self, value: Any) -> list[bytes]:
        if self._single is not None:
            return [self._single(value)]
        out = []
        for path, leaf in self._plan:
            v = value
            for step in path:
                v = v[step]
            out.append(leaf(v))
        return out

    def encode_lanes(self, values: Sequence[Any]) -> list[bytes]:
        """N per-lane values (unbatched codec) as the (N, *shape) slab per leaf."""
        if len(values) == 1:
            return self.encode(values[0])
        per_lane = [self.encode(v) for v in values]
        return [b"".join(parts) for parts in zip(*per_lane, strict=True)]


def space_spec(space: Any) -> SpaceSpec:
    """The `rlmesh.spaces.v1.SpaceSpec` of a Gymnasium space."""
    from gymnasium import spaces as gs

    spec = SpaceSpec()
    if isinstance(space, gs.Box):
        dtype = np.dtype(space.dtype)
        spec.shape.extend(int(d) for d in space.shape)
        spec.dtype = data_type(dtype)  # type: ignore[assignment]
        low = np.asarray(space.low, dtype=dtype.newbyteorder("<"))
        high = np.asarray(space.high, dtype=dtype.newbyteorder("<"))
        if (dtype.kind == "f" and bool(np.all(np.isneginf(low)))
                and bool(np.all(np.isposinf(high)))):
            spec.box.unbounded = True
        elif low.size and bool(np.all(low == low.flat[0])) and bool(np.all(high == high.flat[0])):
            spec.box.uniform.low = low.flat[0:1].tobytes()
            spec.box.uniform.high = high.flat[0:1].tobytes()
        else:
            spec.box.elementwise.low = low.tobytes()
            spec.box.elementwise.high = high.tobytes()
    elif isinstance(space, gs.Discrete):
        spec.dtype = data_type(space.dtype)  # type: ignore[assignment]
        spec.discrete.n = int(space.n)
        spec.discrete.start = int(space.start)
    elif isinstance(space, gs.MultiBinary):
        spec.shape.extend(int(d) for d in space.shape)
        spec.dtype = pb.DATA_TYPE_UINT8
        spec.multi_binary.SetInParent()
    elif isinstance(space, gs.MultiDiscrete):
        spec.shape.extend(int(d) for d in space.shape)
        spec.dtype = data_type(space.dtype)  # type: ignore[assignment]
        spec.multi_discrete.nvec.extend(int(n) for n in np.asarray(space.nvec).ravel())
    elif isinstance(space, gs.Text):
        spec.dtype = pb.DATA_TYPE_UINT8  # rlmesh types Text as uint8 (its UTF-8 bytes)
        spec.text.min_length = int(space.min_length)
        spec.text.max_length = int(space.max_length)
        spec.text.charset = "".join(sorted(space.character_set))
    elif isinstance(space, gs.Dict):
        for key, sub in space.spaces.items():
            spec.dict.keys.append(str(key))
            spec.dict.spaces.append(space_spec(sub))
    elif isinstance(space, gs.Tuple):
        for sub in space.spaces:
            spec.tuple.spaces.append(space_spec(sub))
    else:
        raise TypeError(f"unsupported space {type(space).__name__}")
    return spec


def infer_space(value: Any) -> Any:
    """An unbounded Box (or Discrete for a Python int) describing `value`.

    Used when neither the caller nor the run context gives the env's spaces.
    """
    from gymnasium import spaces as gs

    if isinstance(value, (bool, np.bool_)):
        return gs.MultiBinary(1)
    if isinstance(value, (int, np.integer)):
        return gs.Discrete(np.iinfo(np.int64).max)
    array = np.asarray(value)
    if array.dtype.kind == "f":
        return gs.Box(-np.inf, np.inf, shape=array.shape, dtype=array.dtype)
    info = np.iinfo(array.dtype) if array.dtype.kind in "iu" else None
    if info is None:
        raise TypeError(f"cannot infer a space for {type(value).__name__}")
    return gs.Box(info.min, info.max, shape=array.shape, dtype=array.dtype)

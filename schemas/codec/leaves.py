"""rlmesh leaf bytes -> typed values (runtime-events.md §7): the inverse of the producer's encoder.

An observation or action travels as one bytes entry per fundamental leaf of
its `SpaceSpec`, in canonical pre-order (Dict children in declared key order,
Tuple in index order). `LeafDecoder` compiles a spec once into per-leaf
readers and turns those bytes back into values:

- Box, Discrete, MultiDiscrete, MultiBinary: numpy arrays of the leaf's dtype
  and shape (Discrete: a numpy scalar of its dtype);
- Text: `str`;
- Dict / Tuple: `dict` (declared key order) / `tuple` of their children.

`decode_batch(leaves, n)` reads the batched form of N lanes (the row-major
(N, *shape) slab per leaf; a Text slab is a u64 count, a u64 byte length per
string, then the UTF-8 bodies); N comes from the caller (the event's
`num_envs` or the length of its per-lane vectors), never from byte lengths.
Bytes that do not fit the spec raise `ContractError` naming the leaf.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rlmesh_stream.schemas.contract._pb.rlmesh.spaces.v1 import spaces_pb2 as pb
from rlmesh_stream.schemas.contract.errors import ContractError
from rlmesh_stream.schemas.contract.events import SpaceSpec

DTYPES: dict[int, np.dtype[Any]] = {
    pb.DATA_TYPE_BOOL: np.dtype("bool"), pb.DATA_TYPE_UINT8: np.dtype("<u1"),
    pb.DATA_TYPE_UINT16: np.dtype("<u2"), pb.DATA_TYPE_UINT32: np.dtype("<u4"),
    pb.DATA_TYPE_UINT64: np.dtype("<u8"), pb.DATA_TYPE_INT8: np.dtype("<i1"),
    pb.DATA_TYPE_INT16: np.dtype("<i2"), pb.DATA_TYPE_INT32: np.dtype("<i4"),
    pb.DATA_TYPE_INT64: np.dtype("<i8"), pb.DATA_TYPE_FLOAT16: np.dtype("<f2"),
    pb.DATA_TYPE_FLOAT32: np.dtype("<f4"), pb.DATA_TYPE_FLOAT64: np.dtype("<f8"),
}
_U64 = struct.Struct("<Q")


@dataclass(frozen=True, slots=True)
class Leaf:
    """One fundamental leaf: where it sits (`path`), its kind, dtype and element shape."""

    path: tuple[str | int, ...]
    kind: str  # box, discrete, multi_binary, multi_discrete, text
    dtype: np.dtype[Any]
    shape: tuple[int, ...]

    @property
    def name(self) -> str:
        return "/".join(str(p) for p in self.path) or "<root>"


def leaves_of(spec: SpaceSpec) -> list[Leaf]:
    """The spec's leaves in canonical pre-order (ContractError for a spec it cannot type)."""
    out: list[Leaf] = []
    _walk(spec, (), out)
    return out


def _walk(spec: SpaceSpec, path: tuple[str | int, ...], out: list[Leaf]) -> None:
    kind = spec.WhichOneof("spec")
    where = "/".join(str(p) for p in path) or "<root>"
    if kind == "dict":
        if len(spec.dict.keys) != len(spec.dict.spaces):
            raise ContractError("SpaceSpec", where, list(spec.dict.keys),
                                f"{len(spec.dict.keys)} keys but {len(spec.dict.spaces)} spaces")
        for key, sub in zip(spec.dict.keys, spec.dict.spaces, strict=True):
            _walk(sub, (*path, key), out)
        return
    if kind == "tuple":
        for index, sub in enumerate(spec.tuple.spaces):
            _walk(sub, (*path, index), out)
        return
    if kind is None:
        raise ContractError("SpaceSpec", where, None, "no space kind set")
    if kind == "text":
        out.append(Leaf(path, kind, np.dtype("<u1"), ()))
        return
    dtype = DTYPES.get(int(spec.dtype))
    if kind == "multi_binary":
        dtype = np.dtype("<u1")  # one byte per element whatever the declared dtype
    if dtype is None:
        raise ContractError("SpaceSpec", where, int(spec.dtype), f"no dtype for a {kind} leaf")
    shape = () if kind == "discrete" else tuple(int(d) for d in spec.shape)
    if any(d < 0 for d in shape):
        raise ContractError("SpaceSpec", where, shape, "negative dimension")
    out.append(Leaf(path, kind, dtype, shape))


Reader = Callable[[bytes, int | None], Any]


def _array_reader(leaf: Leaf) -> Reader:
    size = int(np.prod(leaf.shape, dtype=np.int64))
    native = leaf.dtype.newbyteorder("=")
    width = leaf.dtype.itemsize
    scalar = leaf.kind == "discrete"

    def read(data: bytes, n: int | None) -> Any:
        lanes = 1 if n is None else n
        want = lanes * size * width
        if len(data) != want:
            shape = leaf.shape if n is None else (n, *leaf.shape)
            raise ContractError("leaf", leaf.name, f"{len(data)} bytes",
                                f"a {leaf.kind} leaf of shape {shape} and dtype "
                                f"{leaf.dtype.name} holds {want} bytes")
        array = np.frombuffer(data, dtype=leaf.dtype)
        if native != leaf.dtype:
            array = array.astype(native)
        if n is None:
            return array.reshape(leaf.shape)[()] if scalar else array.reshape(leaf.shape)
        return array.reshape((n, *leaf.shape))

    return read


def _text(leaf: Leaf, data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ContractError("leaf", leaf.name, data, f"text is not UTF-8 ({exc.reason})") from None


def _text_reader(leaf: Leaf) -> Reader:
    def read(data: bytes, n: int | None) -> Any:
        if n is None:
            return _text(leaf, data)
        count = _U64.unpack_from(data)[0] if len(data) >= 8 else None
        if count != n:
            raise ContractError("leaf", leaf.name, count, f"text slab counts {count} strings, "
                                f"the event has {n} lanes")
        head = (n + 1) * 8
        if len(data) < head:
            raise ContractError("leaf", leaf.name, f"{len(data)} bytes",
                                f"a text slab of {n} strings needs a {head}-byte header")
        lengths = struct.unpack_from(f"<{n}Q", data, 8)
        if head + sum(lengths) != len(data):
            raise ContractError("leaf", leaf.name, f"{len(data)} bytes",
                                f"text slab header announces {head + sum(lengths)} bytes")
        out, at = [], head
        for length in lengths:
            out.append(_text(leaf, data[at:at + length]))
            at += length
        return out

    return read


class LeafDecoder:
    """One `SpaceSpec`, compiled: `decode(leaves)` for one value, `decode_batch(leaves, n)`."""

    def __init__(self, spec: SpaceSpec) -> None:
        self.spec = spec
        self.leaves = leaves_of(spec)
        self._readers = [_text_reader(leaf) if leaf.kind == "text" else _array_reader(leaf)
                         for leaf in self.leaves]

    def decode(self, leaves: Sequence[bytes]) -> Any:
        """One value (an unbatched payload)."""
        return self._assemble(self._read(leaves, None))

    def decode_batch(self, leaves: Sequence[bytes], n: int) -> Any:
        """N lanes: per leaf an (N, *shape) array (Text: a list of N str), nested as the space."""
        if n < 1:
            raise ContractError("leaves", "<batch>", n, "a batch needs at least one lane")
        return self._assemble(self._read(leaves, n))

    def decode_lanes(self, leaves: Sequence[bytes], n: int) -> list[Any]:
        """N lanes as N separate values, each shaped like `decode`'s."""
        values = self._read(leaves, n)
        lanes = []
        for i in range(n):
            lane = [v[i] for v in values]
            lanes.append(self._assemble(lane))
        return lanes

    def decode_stacked(self, values: Sequence[Sequence[bytes]]) -> np.ndarray | None:
        """T unbatched values (each one's leaves) as one (T, *shape) array, what stacking
        T `decode`s gives, read at once: for a space of one array leaf (not Text, Dict
        or Tuple) whose every value has the leaf's size. None otherwise (decode them one
        by one; that names a bad value)."""
        if len(self.leaves) != 1 or self.leaves[0].path or self.leaves[0].kind == "text":
            return None
        leaf = self.leaves[0]
        width = int(np.prod(leaf.shape, dtype=np.int64)) * leaf.dtype.itemsize
        if not values or any(len(v) != 1 or len(v[0]) != width for v in values):
            return None
        array = np.frombuffer(b"".join([v[0] for v in values]), dtype=leaf.dtype)
        native = leaf.dtype.newbyteorder("=")
        if native != leaf.dtype:
            array = array.astype(native)
        return array.reshape((len(values), *leaf.shape))

    def _read(self, leaves: Sequence[bytes], n: int | None) -> list[Any]:
        if len(leaves) != len(self._readers):
            raise ContractError("leaves", "<payload>", f"{len(leaves)} leaves",
                                f"the SpaceSpec has {len(self._readers)} leaves")
        return [read(data, n) for read, data in zip(self._readers, leaves, strict=True)]

    def _assemble(self, values: list[Any]) -> Any:
        it = iter(values)
        return _build(self.spec, it)


def _build(spec: SpaceSpec, values: Any) -> Any:
    kind = spec.WhichOneof("spec")
    if kind == "dict":
        return {key: _build(sub, values) for key, sub in zip(spec.dict.keys, spec.dict.spaces,
                                                             strict=True)}
    if kind == "tuple":
        return tuple(_build(sub, values) for sub in spec.tuple.spaces)
    return next(values)


def gym_space(spec: SpaceSpec) -> Any:
    """The Gymnasium space a `SpaceSpec` describes (needs gymnasium)."""
    from gymnasium import spaces as gs

    kind = spec.WhichOneof("spec")
    if kind == "dict":
        return gs.Dict({k: gym_space(s) for k, s in zip(spec.dict.keys, spec.dict.spaces,
                                                         strict=True)})
    if kind == "tuple":
        return gs.Tuple([gym_space(s) for s in spec.tuple.spaces])
    (leaf,) = leaves_of(spec)
    if kind == "text":
        if spec.text.charset:
            return gs.Text(max_length=int(spec.text.max_length),
                           min_length=int(spec.text.min_length), charset=spec.text.charset)
        return gs.Text(max_length=int(spec.text.max_length),
                       min_length=int(spec.text.min_length))
    if kind == "discrete":
        return gs.Discrete(int(spec.discrete.n), start=int(spec.discrete.start),
                           dtype=leaf.dtype.newbyteorder("="))
    if kind == "multi_binary":
        return gs.MultiBinary(list(leaf.shape))
    if kind == "multi_discrete":
        nvec = np.asarray(spec.multi_discrete.nvec, dtype=np.int64).reshape(leaf.shape)
        return gs.MultiDiscrete(nvec, dtype=leaf.dtype.newbyteorder("="))
    return _box(spec, leaf)


def _box(spec: SpaceSpec, leaf: Leaf) -> Any:
    from gymnasium import spaces as gs

    dtype = leaf.dtype.newbyteorder("=")
    bounds = spec.box.WhichOneof("bounds")
    if bounds == "uniform":
        low: Any = np.frombuffer(spec.box.uniform.low, dtype=leaf.dtype)[0]
        high: Any = np.frombuffer(spec.box.uniform.high, dtype=leaf.dtype)[0]
    elif bounds == "elementwise":
        low = np.frombuffer(spec.box.elementwise.low, dtype=leaf.dtype).reshape(leaf.shape)
        high = np.frombuffer(spec.box.elementwise.high, dtype=leaf.dtype).reshape(leaf.shape)
    elif dtype.kind == "f":
        low, high = -np.inf, np.inf
    else:
        info = np.iinfo(dtype) if dtype.kind in "iu" else None
        low, high = (info.min, info.max) if info is not None else (0, 1)
    return gs.Box(low=low, high=high, shape=leaf.shape, dtype=dtype)

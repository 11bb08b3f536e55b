"""The C reader of packed projections (`avro_native`) reads and refuses as the Python one.

Any projection of any event type: fields read, dropped, flattened (`route.lane`), read
whole and by attribute (`route` and `route.env_id`), enums, arrays, SpaceSpecs and
MetaMaps (handed to the generated Python reader), constants, the extra argument and
conversions, memoised or not. A payload either reader refuses, the other refuses too.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest
from contract_samples.strategies import events, exact
from hypothesis import given, settings
from hypothesis import strategies as st

from rlmesh_stream.schemas.codec import avro_native, avro_reader
from rlmesh_stream.schemas.codec.avro_fastread import (
    Arg,
    Call,
    Const,
    Framing,
    _Gen,
    compile_projection,
)
from rlmesh_stream.schemas.codec.avro_reader import _refused, _trailing, warm_projection
from rlmesh_stream.schemas.codec.avro_writer import avro_writer
from rlmesh_stream.schemas.contract.avro import load_schema
from rlmesh_stream.schemas.contract.errors import CorruptPayloadError
from rlmesh_stream.schemas.contract.topics import EventType

HEADER = b"\x00\x00\x00\x00\x07"
WHOLE = {"SpaceSpec", "MetaMap"}


def _framing(event_type: EventType) -> Framing:
    name = event_type.event_class.__name__
    return Framing(5, functools.partial(_refused, name), functools.partial(_trailing, name))


def _readers(event_type: EventType, items: list[Any]) -> tuple[Any, Any]:
    framing = _framing(event_type)
    return (compile_projection(event_type, items, framed=framing),
            avro_native.compile_native_projection(event_type, items, framing))


def _paths(event_type: EventType) -> list[str]:
    """Every top-level field, and the fields of the records it holds (not in a union;
    SpaceSpecs and MetaMaps are read whole, never flattened)."""
    gen, paths = _Gen(), []
    for f in load_schema(event_type)["fields"]:
        paths.append(f["name"])
        t = gen.define(f["type"])
        gen.define_all(t)
        if isinstance(t, dict) and t["type"] == "record" and t["name"] not in WHOLE:
            paths += [f"{f['name']}.{sub['name']}" for sub in t["fields"]]
    return paths


@st.composite
def _items(draw: st.DrawFn, event_type: EventType) -> list[Any]:
    paths = draw(st.lists(st.sampled_from(_paths(event_type)), max_size=8))
    items: list[Any] = []
    for path in paths:
        kind = draw(st.sampled_from(["path", "call", "const", "arg"]))
        items.append({"path": path, "call": Call(repr, path), "const": Const(path),
                      "arg": Arg()}[kind])
    return items


def _outcome(read: Any, value: bytes) -> tuple[Any, str | None]:
    try:
        return exact(read(value, 17)), None
    except CorruptPayloadError as exc:
        return None, str(exc).split(" with its writer schema: ")[0]


@pytest.mark.parametrize("event_type", list(EventType), ids=lambda et: et.value)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_any_projection_reads_as_the_python_reader(event_type: EventType, data: Any) -> None:
    items = data.draw(_items(event_type))
    python, native = _readers(event_type, items)
    for event in data.draw(st.lists(events(event_type), min_size=1, max_size=3)):
        value = HEADER + avro_writer(event_type)(event)
        for _ in range(2):  # the second read of the same bytes hits the memoised ones
            assert exact(native(value, 17)) == exact(python(value, 17))


@pytest.mark.parametrize("event_type", list(EventType), ids=lambda et: et.value)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_a_damaged_payload_is_refused_by_both_readers_or_by_neither(
        event_type: EventType, data: Any) -> None:
    python, native = _readers(event_type, data.draw(_items(event_type)))
    payload = bytearray(HEADER + avro_writer(event_type)(data.draw(events(event_type))))
    at = data.draw(st.integers(0, len(payload) - 1))
    if data.draw(st.booleans()):
        payload[at] = data.draw(st.integers(0, 255))
    else:
        del payload[at:]
    assert _outcome(native, bytes(payload)) == _outcome(python, bytes(payload))


@pytest.mark.parametrize("event_type", list(EventType), ids=lambda et: et.value)
@settings(max_examples=8, deadline=None)
@given(data=st.data())
def test_every_byte_damaged_or_cut_is_refused_by_both_readers_or_by_neither(
        event_type: EventType, data: Any) -> None:
    # each position in turn: a union branch, a boolean, a varint's continuation bit...
    python, native = _readers(event_type, data.draw(_items(event_type)))
    payload = HEADER + avro_writer(event_type)(data.draw(events(event_type)))
    for at in range(len(payload)):
        cut = payload[:at]
        assert _outcome(native, cut) == _outcome(python, cut)
        for byte in (0, 1, 2, 3, 0x7F, 0x80, 0xC3, 0xFF):
            damaged = payload[:at] + bytes([byte]) + payload[at + 1:]
            assert _outcome(native, damaged) == _outcome(python, damaged)


def _long(n: int, width: int = 0) -> bytes:
    """n zigzag-encoded as a varint, padded with continuation bytes to `width` bytes."""
    z = (n << 1) ^ (n >> 70) if n < 0 else n << 1
    out = bytearray()
    while z >= 0x80 or len(out) < width - 1:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def _session_ended(total_steps: bytes) -> bytes:
    text = _long(1) + b"s"
    return (HEADER + text + text + text + text + b"\x00"  # session, route's ids, lane null
            + text + total_steps + _long(3))  # reason, total_steps, total_episodes


@pytest.mark.parametrize("varint", [_long(5, width=10), _long(2**63 - 1), _long(-2**63),
                                    bytes([0xFF] * 9 + [0x7F]), bytes([0x80] * 10 + [0])],
                         ids=["padded", "max", "min", "beyond-64-bits", "eleven-bytes"])
def test_a_long_varint_reads_as_the_python_reader_reads_it(varint: bytes) -> None:
    python, native = _readers(EventType.SESSION_ENDED, ["total_steps", "total_episodes"])
    assert _outcome(native, _session_ended(varint)) == _outcome(python, _session_ended(varint))


@pytest.mark.parametrize("reader", ["python", "c"])
def test_a_conversion_of_a_field_that_is_no_meta_map_is_applied(reader: str) -> None:
    # only a MetaMap's conversion is read memoised; any other is applied to the value
    items = [Call(repr, "reason"), Call(repr, "route.env_id"), Call(repr, "total_steps")]
    value = _session_ended(_long(2))
    read = _readers(EventType.SESSION_ENDED, items)[reader == "c"]
    assert read(value, 0) == ("'s'", "'s'", "2")


def test_a_projection_of_a_missing_field_is_refused_when_compiled() -> None:
    with pytest.raises(KeyError, match="no field 'nope'"):
        _readers(EventType.SESSION_ENDED, ["nope"])


def test_the_c_reader_is_built() -> None:
    # the install compiles it (setup.py); without it consumers fall back to Python
    assert avro_native.available()


def test_without_the_extension_consumers_read_with_the_python_reader(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(avro_native, "_avro_project", None)
    monkeypatch.setattr(avro_reader, "_PROJECTIONS", {})
    project = warm_projection(EventType.SESSION_ENDED, ["session_id"])
    assert project.__name__ == "project"  # the generated Python function
    value = _session_ended(_long(2))
    assert project(value, 0) == ("s",)

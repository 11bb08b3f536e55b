"""A packed builder's rows are the same however they are made.

The generated projection decoder (`avro_fastread.compile_projection`, straight from the
bytes) against the projection of the fully decoded event; a damaged payload is refused
by both or by neither; packed rows merge (`tuple_merger`) exactly as `merge_rows`.
"""

from __future__ import annotations

import functools
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlmesh_stream.consumers.builders import EpisodesBuilder
from rlmesh_stream.consumers.runtime.records import epoch_ms, timestamp_of
from rlmesh_stream.consumers.table_model import merge_rows, tuple_merger
from rlmesh_stream.consumers.tables import EPISODES
from rlmesh_stream.schemas.codec.avro_fastread import Framing, compile_projection, compile_reader
from rlmesh_stream.schemas.codec.avro_reader import (
    _refused,
    _trailing,
    _whole_record,
    warm_projection,
)
from rlmesh_stream.schemas.codec.avro_writer import avro_writer
from tests.contract_samples.strategies import events, exact

T0 = epoch_ms(datetime(2026, 1, 1, tzinfo=UTC))  # packed rows hold timestamps in ms
PROJECTED = sorted(EpisodesBuilder.projections, key=lambda et: et.value)


def _decode(fn: Any, *args: Any) -> tuple[Any, Exception | None]:
    try:
        value, end = fn(*args)
    except Exception as exc:  # the reader's own error, whichever it is
        return None, exc
    return (value, end), None


@pytest.mark.parametrize("event_type", PROJECTED, ids=lambda et: et.value)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_projected_rows_equal_the_projection_of_the_decoded_event(event_type: Any,
                                                                  data: Any) -> None:
    projection = EpisodesBuilder.projections[event_type]
    project = compile_projection(event_type, list(projection.items))
    event = data.draw(events(event_type))
    payload = avro_writer(event_type)(event)
    for _ in range(2):  # the second read of the same bytes hits the memoised conversions
        values, end = project(payload, 0, T0)
        assert end == len(payload)
        assert exact(values) == exact(projection.pack(event, T0))


@pytest.mark.parametrize("event_type", PROJECTED, ids=lambda et: et.value)
@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_a_damaged_payload_is_refused_by_both_readers_or_by_neither(event_type: Any,
                                                                    data: Any) -> None:
    projection = EpisodesBuilder.projections[event_type]
    project = compile_projection(event_type, list(projection.items))
    full = compile_reader(event_type)[0]
    payload = bytearray(avro_writer(event_type)(data.draw(events(event_type))))
    at = data.draw(st.integers(0, len(payload) - 1))
    if data.draw(st.booleans()):
        payload[at] = data.draw(st.integers(0, 255))
    else:
        del payload[at:]
    damaged = bytes(payload)
    decoded, refused = _decode(full, damaged, 0)
    for _ in range(2):
        projected, projection_refused = _decode(project, damaged, 0, T0)
        assert (refused is None) == (projection_refused is None), (refused, projection_refused)
        if decoded is not None:
            assert projected[1] == decoded[1]  # the same end: trailing bytes refused alike
            assert exact(projected[0]) == exact(projection.pack(decoded[0], T0))


def _framed(kind: str, event_type: Any, items: list[Any]) -> Any:
    if kind == "warmed":
        return warm_projection(event_type, items)  # compiled once, ahead (the consumers')
    name = event_type.event_class.__name__
    return compile_projection(event_type, items, framed=Framing(
        5, functools.partial(_refused, name), functools.partial(_trailing, name)))


@pytest.mark.parametrize("kind", ["compiled", "warmed"])
@pytest.mark.parametrize("event_type", PROJECTED, ids=lambda et: et.value)
@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_the_framed_projection_reads_and_refuses_as_the_projection_read_whole(
        kind: str, event_type: Any, data: Any) -> None:
    items = list(EpisodesBuilder.projections[event_type].items)
    framed, project = _framed(kind, event_type, items), compile_projection(event_type, items)
    payload = bytearray(b"\x00\x00\x00\x00\x07" + avro_writer(event_type)(
        data.draw(events(event_type))))
    if data.draw(st.booleans()):  # damaged: a byte changed, or the payload cut short
        at = data.draw(st.integers(5, len(payload) - 1))
        if data.draw(st.booleans()):
            payload[at] = data.draw(st.integers(0, 255))
        else:
            del payload[at:]
    name = event_type.event_class.__name__
    whole, refused = _decode(lambda: (_whole_record(name, project, bytes(payload), 5, T0), 0))
    for value in (bytes(payload), memoryview(bytes(payload))):
        got, framed_refused = _decode(lambda v=value: (framed(v, T0), 0))
        assert type(framed_refused) is type(refused)
        assert str(framed_refused) == str(refused)
        assert exact(got) == exact(whole)


@pytest.mark.parametrize("event_type", PROJECTED, ids=lambda et: et.value)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_one_projection_reads_each_event_of_a_stream_as_its_own(event_type: Any,
                                                                data: Any) -> None:
    # One reader over many events whose routes come from a small pool (its memo of the
    # route's ids hits, misses and evicts), ids that are prefixes of one another included.
    projection = EpisodesBuilder.projections[event_type]
    project = compile_projection(event_type, list(projection.items))
    ids = st.sampled_from(["", "e", "env", "env-0", "env-01", "\u00e9nv"])
    stream = data.draw(st.lists(events(event_type), min_size=1, max_size=12))
    for event in stream:
        if event.route is not None and data.draw(st.booleans()):
            event.route.env_id = data.draw(ids)
            event.route.env_component_id = data.draw(ids)
            event.route.model_component_id = data.draw(ids)
        payload = avro_writer(event_type)(event)
        values, end = project(payload, 0, T0)
        assert end == len(payload)
        assert exact(values) == exact(projection.pack(event, T0))


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_packed_rows_merge_as_merge_rows(data: Any) -> None:
    kinds = [et for et in PROJECTED if EpisodesBuilder.projections[et].table is EPISODES]
    rows = []
    for _ in range(data.draw(st.integers(1, 4))):
        event_type = data.draw(st.sampled_from(kinds))
        projection = EpisodesBuilder.projections[event_type]
        event = data.draw(events(event_type))
        stamp = T0 + data.draw(st.integers(0, 59_999))
        rows.append(projection.pack(event, stamp))
    packed = rows[0]
    as_dicts = dict(zip(EPISODES.column_names, rows[0], strict=True))
    for row in rows[1:]:
        packed = tuple_merger(EPISODES)(packed, row)
        as_dicts = merge_rows(EPISODES, as_dicts,
                              dict(zip(EPISODES.column_names, row, strict=True)))
    assert exact(packed) == exact(tuple(as_dicts[c] for c in EPISODES.column_names))


def test_packed_timestamps_are_the_record_timestamps_in_ms() -> None:
    for ms in (0, 1, T0, T0 + 999, 2**41 + 7):
        assert epoch_ms(timestamp_of(ms)) == ms

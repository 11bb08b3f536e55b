"""What the joiner reads of each trajectory event (`packed.ITEMS`): read straight from a
payload by the generated reader, or taken from an event decoded whole (another writer
schema), it is the same."""

from __future__ import annotations

import pytest

from rlmesh_stream.consumers.builders.projection import packer_of
from rlmesh_stream.consumers.datasets.packed import ITEMS
from rlmesh_stream.consumers.datasets.sink import TRAJECTORY_EVENTS
from rlmesh_stream.schemas.codec.avro_reader import warm_projection
from rlmesh_stream.schemas.codec.avro_writer import avro_writer
from tests.contract_samples.examples import example, step_event

HEADER = b"\x00\x00\x00\x00\x01"


def test_the_joiner_reads_every_trajectory_event_packed():
    assert set(ITEMS) == TRAJECTORY_EVENTS


@pytest.mark.parametrize("event_type", sorted(ITEMS, key=lambda et: et.value),
                         ids=lambda et: et.value)
def test_packed_values_from_a_payload_equal_those_of_the_decoded_event(event_type):
    event = example(event_type)
    value = avro_writer(event_type)(event, HEADER)
    items = list(ITEMS[event_type])
    assert warm_projection(event_type, items)(value, None) == packer_of(ITEMS[event_type])(
        event, None)


def test_a_group_step_is_read_packed_with_every_lane():
    event = step_event(8)
    et = next(et for et in ITEMS if et.event_class is type(event))
    packed = warm_projection(et, list(ITEMS[et]))(avro_writer(et)(event, HEADER), None)
    assert list(packed[3]) == list(event.rewards) and len(packed[3]) == 8


def test_the_session_id_comes_first_so_the_key_can_be_checked():
    assert {items[0] for items in ITEMS.values()} == {"session_id"}

"""The generated Flink DDL, run in a real local PyFlink over a simulated fleet, reads every
record of every topic with every field equal to what the project's own decoder reads."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from rlmesh_stream.schemas.contract.topics import EVENT_TYPES, EventType
from rlmesh_stream.schemas.engines.flink import table_name
from rlmesh_stream.schemas.engines.reader import reader_schema
from tests.engines.engine_values import expected_row, flink_timestamp_ms

pytestmark = [pytest.mark.stack, pytest.mark.slow]


def _by_position(rows: list[dict[str, Any]]) -> dict[tuple[int, int], dict[str, Any]]:
    return {(r["kafka_partition"], r["kafka_offset"]): r for r in rows}


@pytest.mark.parametrize("et", EVENT_TYPES, ids=lambda et: et.value)
def test_flink_reads_every_record_of_the_topic(et: EventType, flink_rows: Any,
                                               decoded: Any) -> None:
    assert decoded[et], f"the fleet wrote no {et.value} records"
    flink = _by_position(flink_rows[table_name(et)])
    assert sorted(flink) == sorted((d.partition, d.offset) for d in decoded[et])


@pytest.mark.parametrize("et", EVENT_TYPES, ids=lambda et: et.value)
def test_flink_fields_equal_the_project_decoder(et: EventType, flink_rows: Any,
                                                decoded: Any) -> None:
    reader = reader_schema(et)
    flink = _by_position(flink_rows[table_name(et)])
    for record in decoded[et]:
        row = flink[(record.partition, record.offset)]
        want = expected_row(reader, record.event)
        assert {k: row[k] for k in want} == want, (record.partition, record.offset)


@pytest.mark.parametrize("et", EVENT_TYPES, ids=lambda et: et.value)
def test_flink_kafka_columns_equal_the_record(et: EventType, flink_rows: Any,
                                              decoded: Any) -> None:
    flink = _by_position(flink_rows[table_name(et)])
    for record in decoded[et]:
        row = flink[(record.partition, record.offset)]
        assert row["kafka_key"] == record.key
        assert flink_timestamp_ms(row["kafka_timestamp"]) == record.timestamp_ms
        assert {k: base64.b64decode(v) for k, v in row["kafka_headers"].items()} == \
            record.headers


@pytest.mark.parametrize("et", [EventType.EPISODE_COMPLETED, EventType.STEP_COMPLETED,
                                EventType.ACTION_RECEIVED], ids=lambda et: et.value)
def test_flink_reads_the_columns_beside_a_deep_left_out_field(et: EventType, flink_rows: Any,
                                                              decoded: Any) -> None:
    """The fleet has one record each with a 12-deep MetaMap or a dict-of-tuple space."""
    (deep,) = [d for d in decoded[et] if d.key.startswith("deep-")]
    row = _by_position(flink_rows[table_name(et)])[(deep.partition, deep.offset)]
    assert row["session_id"] == deep.event.session_id
    assert row == {**row, **expected_row(reader_schema(et), deep.event)}

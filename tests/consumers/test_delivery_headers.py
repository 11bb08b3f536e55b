"""The delivery check reads both versions of the contract's headers.

Version 2 (what the hook writes) packs producer id and sequence into one
`rlmesh.ps` header; version 1 (older records, other producers) has
`rlmesh.producer_id` and `rlmesh.seq`. Either way a record counts once under
its producer, gaps and duplicates show, and a bad sequence is an invalid header.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from rlmesh_stream.consumers.builders import DeliveryBuilder
from rlmesh_stream.consumers.datasets.certificate import header_sequence
from rlmesh_stream.consumers.runtime.records import Record
from rlmesh_stream.consumers.tables import DELIVERY_BATCH, INVALID_HEADERS
from rlmesh_stream.producer.hooks import KafkaRuntimeHooks
from rlmesh_stream.schemas.connection.config import StreamConfig
from rlmesh_stream.schemas.contract import events as ev
from rlmesh_stream.schemas.contract import headers as h
from rlmesh_stream.schemas.contract.topics import EventType
from tests.consumers.consumer_helpers import PlainKafkaHooks, create_topics, query, run_offline

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _rows(headers: dict[str, bytes]) -> list[tuple[Any, dict[str, Any]]]:
    record = Record("t", 0, 7, T0, EventType.SESSION_STARTED, None, headers)
    return [(table.name, row) for table, row in DeliveryBuilder().rows(record)]


def _v2(producer: str, seq: str) -> dict[str, bytes]:
    return {h.PRODUCER_SEQUENCE: f"{producer}:{seq}".encode()}


def _v1(producer: str, seq: str) -> dict[str, bytes]:
    return {h.EVENT_TYPE: b"session_started", h.CONTRACT: b"1",
            h.PRODUCER_ID: producer.encode(), h.SEQUENCE: seq.encode()}


@pytest.mark.parametrize("headers", [_v1("p1", "41"), _v2("p1", "41")], ids=["v1", "v2"])
def test_either_version_gives_the_same_sequence_row(headers: dict[str, bytes]) -> None:
    assert _rows(headers) == [
        (DELIVERY_BATCH.name, {"producer_id": "p1", "seq": 41, "copies": 1})]
    assert header_sequence(headers) == ("p1", 41)


@pytest.mark.parametrize(("value", "producer", "seq"), [
    (b"p1:-5", "p1", "-5"), (b"p1:12x", "p1", "12x"), (b"p1:" + str(2**63).encode(), "p1",
                                                       str(2**63)),
    (b"p1:", "p1", ""), (b"no-separator", "", "no-separator"),
])
def test_a_bad_packed_sequence_is_an_invalid_header_named_rlmesh_ps(
    value: bytes, producer: str, seq: str,
) -> None:
    [(table, row)] = _rows({h.PRODUCER_SEQUENCE: value})
    assert table == INVALID_HEADERS.name
    assert (row["header"], row["producer_id"], row["header_value"]) == (
        h.PRODUCER_SEQUENCE, producer, seq)


@pytest.mark.parametrize("seq", ["-5", " 7", "1_000", "\u0661", str(2**63), "9" * 4000])
def test_the_exports_certificate_counts_no_sequence_the_delivery_check_calls_invalid(
    seq: str,
) -> None:
    """int() takes a sign, blanks, underscores and thousands of digits: the certificate
    counted "-5" and 2**63 as sequences, which the delivery check calls invalid."""
    assert header_sequence(_v2("p1", seq)) is None


def test_records_without_delivery_headers_are_not_counted() -> None:
    assert _rows({}) == []
    assert _rows({h.PRODUCER_ID: b"p1"}) == []
    assert header_sequence({}) is None


def test_the_packed_header_wins_over_version_1_headers_of_the_same_record() -> None:
    headers = {**_v1("old", "1"), **_v2("new", "2")}
    assert _rows(headers) == [
        (DELIVERY_BATCH.name, {"producer_id": "new", "seq": 2, "copies": 1})]


def test_a_producer_id_with_the_separator_is_refused() -> None:
    with pytest.raises(ValueError, match="cannot contain"):
        h.stamp_prefix("a:b")


@pytest.mark.stack
def test_a_hook_writing_version_2_next_to_a_version_1_producer_gaps_and_duplicates_show(
    stream_config: StreamConfig, duckdb_url: str,
) -> None:
    create_topics(stream_config, partitions=2)
    route = ev.RuntimeEnvContext(env_id="e", env_component_id="env",
                                 model_component_id="m", lane=None)
    hooks = KafkaRuntimeHooks(config=stream_config, install_exit_handlers=False,
                              startup_wait_s=15)
    for i in range(20):
        hooks.session_started(ev.SessionStartedEvent(session_id=f"s{i}", route=route,
                                                     env_id="e"))
    assert hooks.close(30).delivered == 20
    old = PlainKafkaHooks(stream_config, producer_id="v1-producer")
    for i in range(5):
        old.publish(EventType.SESSION_STARTED,
                    ev.SessionStartedEvent(session_id=f"o{i}", route=route, env_id="e"),
                    seq=i if i != 3 else 2)  # seq 2 twice, 3 missing
    old.flush()

    run_offline(stream_config, duckdb_url, ["delivery"])

    assert query(duckdb_url, "SELECT producer_id, CAST(records AS BIGINT), gaps, "
                             "CAST(duplicates AS BIGINT) FROM delivery_producers "
                             "ORDER BY producer_id = 'v1-producer'") == [
        (hooks.producer_id, 20, 0, 0), ("v1-producer", 5, 1, 1)]

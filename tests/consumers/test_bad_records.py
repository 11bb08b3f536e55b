"""Records that cannot be decoded go to the dead-letter topic, are counted, and are skipped;
sequence headers show a producer's gaps and duplicates."""

from __future__ import annotations

import struct
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer

from rlmesh_stream.schemas.connection.config import StreamConfig
from rlmesh_stream.schemas.contract import events as ev
from rlmesh_stream.schemas.contract import headers as h
from rlmesh_stream.schemas.contract.topics import EventType
from tests.consumers.consumer_helpers import PlainKafkaHooks, create_topics, query, run_offline

pytestmark = pytest.mark.stack

ROUTE = ev.RuntimeEnvContext(env_id="e", env_component_id="ec", model_component_id="m")


def _started(session_id: str) -> ev.SessionStartedEvent:
    return ev.SessionStartedEvent(session_id=session_id, route=ROUTE, env_id="e")


def _read_all(config: StreamConfig, topic: str, expected: int) -> list[Any]:
    consumer = Consumer({**config.kafka_config(), "group.id": uuid.uuid4().hex,
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    out: list[Any] = []
    try:
        for _ in range(60):
            out.extend(m for m in consumer.consume(100, 0.5) if m.error() is None)
            if len(out) >= expected:
                break
    finally:
        consumer.close()
    return out


@pytest.fixture
def published_with_bad_records(stream_config: StreamConfig) -> PlainKafkaHooks:
    """A good session, three undecodable records, another good session, on one partition."""
    create_topics(stream_config, partitions=1)
    hooks = PlainKafkaHooks(stream_config)
    et = EventType.SESSION_STARTED
    hooks.publish(et, _started("good-1"))
    good = hooks.serializer.serialize(_started("x"))
    hooks.produce_raw(et, "bad-magic", b"\x07" + good[1:])
    hooks.produce_raw(et, "unknown-id", b"\x00" + struct.pack(">I", 2_000_000_000) + good[5:])
    hooks.produce_raw(et, "corrupt", good[:5] + b"\xff\xff\xff\xff\xff")
    hooks.publish(et, _started("good-2"))
    hooks.flush()
    return hooks


def test_undecodable_records_are_dead_lettered_and_the_rest_applied(
    stream_config: StreamConfig, published_with_bad_records: PlainKafkaHooks, duckdb_url: str,
) -> None:
    runtime = run_offline(stream_config, duckdb_url, ["sessions"])
    assert runtime.dead_letters == 3
    assert query(duckdb_url, "SELECT session_id FROM sessions ORDER BY 1") == [
        ("good-1",), ("good-2",)]
    errors = query(duckdb_url, "SELECT record_offset, split_part(error, ':', 1) "
                               "FROM dead_letters ORDER BY 1")
    assert errors == [(1, "BadMagicByteError"), (2, "UnknownSchemaIdError"),
                      (3, "CorruptPayloadError")]


def test_dead_lettered_records_still_count_as_delivered(
    stream_config: StreamConfig, published_with_bad_records: PlainKafkaHooks, duckdb_url: str,
) -> None:
    run_offline(stream_config, duckdb_url, ["sessions", "delivery"])
    assert query(duckdb_url, "SELECT records, gaps, duplicates FROM delivery_producers") == [
        (5, 0, 0)]


def test_dead_letters_carry_the_error_and_their_source_in_headers(
    stream_config: StreamConfig, published_with_bad_records: PlainKafkaHooks, duckdb_url: str,
) -> None:
    run_offline(stream_config, duckdb_url, ["sessions"])
    letters = _read_all(stream_config, f"{stream_config.topic_prefix}.dlq", 3)
    source = EventType.SESSION_STARTED.topic(stream_config.topic_prefix)
    got = []
    for m in letters:
        headers = dict(m.headers())
        got.append((m.key(), headers[h.DLQ_TOPIC].decode(), headers[h.DLQ_PARTITION],
                    headers[h.DLQ_OFFSET], headers[h.DLQ_ERROR].split(b":")[0]))
    assert got == [
        (b"bad-magic", source, b"0", b"1", b"BadMagicByteError"),
        (b"unknown-id", source, b"0", b"2", b"UnknownSchemaIdError"),
        (b"corrupt", source, b"0", b"3", b"CorruptPayloadError"),
    ]


def test_sequence_gaps_and_duplicates_are_counted_per_producer(
    stream_config: StreamConfig, duckdb_url: str,
) -> None:
    create_topics(stream_config, partitions=2)
    lossy = PlainKafkaHooks(stream_config, producer_id="lossy")
    for i, seq in enumerate([0, 1, 2, 2, 4, 5, 5, 8]):  # 3, 6, 7 lost; 2 and 5 twice
        lossy.publish(EventType.SESSION_STARTED, _started(f"s{i}"), seq=seq)
    clean = PlainKafkaHooks(stream_config, producer_id="clean")
    for i in range(5):
        clean.publish(EventType.SESSION_STARTED, _started(f"c{i}"))
    lossy.flush()
    clean.flush()
    run_offline(stream_config, duckdb_url, ["delivery"])
    assert query(duckdb_url, "SELECT producer_id, records, gaps, duplicates "
                             "FROM delivery_producers ORDER BY 1") == [
        ("clean", 5, 0, 0), ("lossy", 8, 3, 2)]

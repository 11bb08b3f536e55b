"""Poison pills: no single record, however large, misplaced or badly stamped, stops ingestion.

Each test publishes good records around one hostile record and checks that the good ones
are applied, the hostile one is dead-lettered or counted where the docs say, and that a
second run over the same store starts cleanly (no crash loop).
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from rlmesh_stream.consumers.deadletter import (
    MAX_DEAD_LETTER_BYTES,
    DeadLetter,
    DeadLetterQueue,
)
from rlmesh_stream.consumers.runtime import ConsumerError
from rlmesh_stream.schemas.codec.wire import frame
from rlmesh_stream.schemas.connection.config import StreamConfig
from rlmesh_stream.schemas.contract import events as ev
from rlmesh_stream.schemas.contract import headers as h
from rlmesh_stream.schemas.contract.topics import MAX_MESSAGE_BYTES, EventType, subject_name
from tests.consumers.consumer_helpers import PlainKafkaHooks, create_topics, query, run_offline
from tests.contract_samples.examples import example
from tests.contract_samples.hostile import (
    deep,
    out_of_range,
    v2_schema,
    with_route_lane_and_env_index,
    with_session_id,
)

pytestmark = pytest.mark.stack

ROUTE = ev.RuntimeEnvContext(env_id="e", env_component_id="ec", model_component_id="m")
INT64_MAX = 2**63 - 1


def _started(session_id: str) -> ev.SessionStartedEvent:
    return ev.SessionStartedEvent(session_id=session_id, route=ROUTE, env_id="e")


def _produce(config: StreamConfig, topic: str, value: bytes) -> None:
    """A record from a raw client, as a foreign or broken producer would write it."""
    producer = Producer({**config.kafka_config(), "message.max.bytes": MAX_MESSAGE_BYTES})
    producer.produce(topic, key=b"raw", value=value)
    assert producer.flush(30) == 0


def test_an_undecodable_record_larger_than_a_megabyte_is_dead_lettered(
    stream_config: StreamConfig, duckdb_url: str,
) -> None:
    create_topics(stream_config, partitions=1)
    hooks = PlainKafkaHooks(stream_config)
    et = EventType.SESSION_STARTED
    hooks.publish(et, _started("before"))
    hooks.flush()
    _produce(stream_config, et.topic(stream_config.topic_prefix),
             b"\x00\x00\x00\x00\x08" + b"\xff" * 1_500_000)
    hooks.publish(et, _started("after"))
    hooks.flush()

    runtime = run_offline(stream_config, duckdb_url, ["sessions"])

    assert runtime.dead_letters == 1
    assert query(duckdb_url, "SELECT session_id FROM sessions ORDER BY 1") == [
        ("after",), ("before",)]
    assert query(duckdb_url, "SELECT record_offset, dead_letter_topic FROM dead_letters") == [
        (1, f"{stream_config.topic_prefix}.dlq")]


def test_a_record_timestamped_past_the_year_9999_is_dead_lettered_and_the_rest_applied(
    stream_config: StreamConfig, duckdb_url: str,
) -> None:
    """Any producer sets its records' timestamps; a broker takes one past the year 9999
    where `message.timestamp.after.max.ms` allows it (unbounded before Kafka 4.0). No
    datetime holds it: the consumer stopped on it, at every restart."""
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    create_topics(stream_config, partitions=1)
    et = EventType.SESSION_STARTED
    unbounded = ConfigEntry("message.timestamp.after.max.ms", str(INT64_MAX),
                            incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ResourceType.TOPIC, et.topic(stream_config.topic_prefix),
                              incremental_configs=[unbounded])
    admin = AdminClient(stream_config.kafka_config())  # alive until the result is in
    for done in admin.incremental_alter_configs([resource]).values():
        done.result(30)
    hooks = PlainKafkaHooks(stream_config)
    hooks.publish(et, _started("before"))
    hooks.publish(et, _started("year-10000"), timestamp=253_402_300_800_000)
    hooks.publish(et, _started("after"))
    hooks.flush()

    runtime = run_offline(stream_config, duckdb_url, ["sessions", "delivery"])
    again = run_offline(stream_config, duckdb_url, ["sessions"])

    assert (runtime.dead_letters, again.dead_letters) == (1, 0)
    assert query(duckdb_url, "SELECT session_id FROM sessions ORDER BY 1") == [
        ("after",), ("before",)]
    assert query(duckdb_url, "SELECT record_offset, error FROM dead_letters") == [
        (1, "TimestampOutOfRangeError: record timestamp 253402300800000 ms is outside the "
            "years 1 to 9999")]


def test_a_record_the_dead_letter_topic_refuses_is_recorded_with_the_reason_and_skipped(
    stream_config: StreamConfig, duckdb_url: str,
) -> None:
    create_topics(stream_config, partitions=1)
    dlq = DeadLetterQueue(stream_config, f"{stream_config.topic_prefix}.dlq")
    too_big = DeadLetter("t", 0, 7, "CorruptPayloadError: x", b"k",
                         b"\xff" * (MAX_DEAD_LETTER_BYTES + 1))
    fine = DeadLetter("t", 0, 8, "CorruptPayloadError: y", b"k", b"\xff" * 10)
    try:
        refused = dlq.send([too_big, fine])
    finally:
        dlq.close()
    assert list(refused) == [("t", 0, 7)]
    assert "MSG_SIZE_TOO_LARGE" in refused[("t", 0, 7)]


def test_a_consumer_whose_dead_letter_topic_refuses_a_record_applies_the_rest_and_restarts(
    stream_config: StreamConfig, duckdb_url: str,
) -> None:
    create_topics(stream_config, partitions=1)
    # a dead-letter topic limited to 1 MiB, as a broker's default would make it
    from confluent_kafka.admin import AdminClient, NewTopic

    dlq_topic = f"{stream_config.topic_prefix}.small-dlq"
    admin = AdminClient(stream_config.kafka_config())
    admin.create_topics([NewTopic(dlq_topic, 1, 1, config={"max.message.bytes": "1048576"})])[
        dlq_topic].result(30)
    hooks = PlainKafkaHooks(stream_config)
    et = EventType.SESSION_STARTED
    hooks.publish(et, _started("before"))
    hooks.flush()
    _produce(stream_config, et.topic(stream_config.topic_prefix),
             b"\x00\x00\x00\x00\x08" + b"\xff" * 1_500_000)
    hooks.publish(et, _started("after"))
    hooks.flush()

    run_offline(stream_config, duckdb_url, ["sessions"], dlq_topic=dlq_topic)
    again = run_offline(stream_config, duckdb_url, ["sessions"], dlq_topic=dlq_topic)

    assert again.dead_letters == 0  # nothing left over: the record was skipped for good
    assert query(duckdb_url, "SELECT session_id FROM sessions ORDER BY 1") == [
        ("after",), ("before",)]
    [(offset, topic, error)] = query(
        duckdb_url, "SELECT record_offset, dead_letter_topic, error FROM dead_letters")
    assert (offset, topic) == (1, None)
    assert error.startswith("CorruptPayloadError")
    assert f"not copied to the dead-letter topic {dlq_topic}" in error
    assert "MSG_SIZE_TOO_LARGE" in error


def test_a_record_of_another_event_type_on_a_topic_is_dead_lettered(
    stream_config: StreamConfig, duckdb_url: str,
) -> None:
    create_topics(stream_config, partitions=1)
    hooks = PlainKafkaHooks(stream_config)
    et = EventType.SESSION_STARTED
    hooks.publish(et, _started("good"))
    ended = ev.SessionEndedEvent(session_id="misplaced", route=ROUTE, reason="done",
                                 total_steps=1, total_episodes=1)
    hooks.produce_raw(et, "misplaced", hooks.serializer.serialize(ended))
    hooks.flush()

    runtime = run_offline(stream_config, duckdb_url, ["sessions"])

    assert runtime.dead_letters == 1
    assert query(duckdb_url, "SELECT session_id FROM sessions") == [("good",)]
    [(error,)] = query(duckdb_url, "SELECT error FROM dead_letters")
    assert error.startswith("WrongEventTypeError") and "session_ended" in error


def test_a_tombstone_is_dead_lettered_as_a_tombstone(
    stream_config: StreamConfig, duckdb_url: str,
) -> None:
    create_topics(stream_config, partitions=1)
    topic = EventType.SESSION_STARTED.topic(stream_config.topic_prefix)
    producer = Producer(stream_config.kafka_config())
    producer.produce(topic, key=b"gone", value=None)
    assert producer.flush(30) == 0

    run_offline(stream_config, duckdb_url, ["sessions"])

    [(error,)] = query(duckdb_url, "SELECT error FROM dead_letters")
    assert "tombstone" in error


@pytest.mark.parametrize("bad_seq", [str(2**63), str(2**70), "-5", "12x"])
def test_a_sequence_header_out_of_range_is_counted_invalid_and_ingestion_goes_on(
    stream_config: StreamConfig, sink_url: str, bad_seq: str,
) -> None:
    create_topics(stream_config, partitions=1)
    hooks = PlainKafkaHooks(stream_config, producer_id="p")
    et = EventType.SESSION_STARTED
    hooks.publish(et, _started("s0"), seq=0)
    hooks.publish(et, _started("s1"), seq=1)
    hooks.producer.produce(et.topic(stream_config.topic_prefix), key=b"s2",
                           value=hooks.serializer.serialize(_started("s2")),
                           headers=[(h.PRODUCER_ID, b"p"), (h.SEQUENCE, bad_seq.encode())])
    hooks.publish(et, _started("s3"), seq=2)
    hooks.flush()

    run_offline(stream_config, sink_url, ["all"])

    assert query(sink_url, "SELECT COUNT(*) FROM sessions") == [(4,)]
    assert query(sink_url, "SELECT producer_id, CAST(records AS BIGINT), gaps, "
                           "CAST(duplicates AS BIGINT) FROM delivery_producers") == [
        ("p", 3, 0, 0)]
    assert query(sink_url, "SELECT producer_id, record_offset, header, header_value "
                           "FROM invalid_headers") == [("p", 2, h.SEQUENCE, bad_seq)]


def test_the_largest_sequence_does_not_overflow_the_other_producers_counts(
    stream_config: StreamConfig, sink_url: str,
) -> None:
    create_topics(stream_config, partitions=1)
    huge = PlainKafkaHooks(stream_config, producer_id="huge")
    huge.publish(EventType.SESSION_STARTED, _started("h"), seq=INT64_MAX)
    other = PlainKafkaHooks(stream_config, producer_id="other")
    for i in range(3):
        other.publish(EventType.SESSION_STARTED, _started(f"o{i}"))
    huge.flush()
    other.flush()

    run_offline(stream_config, sink_url, ["delivery"])

    assert query(sink_url, "SELECT producer_id, CAST(records AS BIGINT), gaps "
                           "FROM delivery_producers ORDER BY 1") == [("other", 3, 0)]
    assert query(sink_url, "SELECT producer_id, header_value FROM invalid_headers") == [
        ("huge", str(INT64_MAX))]


def test_report_delivery_shows_invalid_headers(
    stream_config: StreamConfig, duckdb_url: str,
) -> None:
    from rlmesh_stream.consumers.analysis.reports.delivery import delivery_report
    from rlmesh_stream.consumers.analysis.reports.store import open_store

    create_topics(stream_config, partitions=1)
    hooks = PlainKafkaHooks(stream_config, producer_id=uuid.uuid4().hex)
    hooks.publish(EventType.SESSION_STARTED, _started("a"), seq=-1)
    hooks.publish(EventType.SESSION_STARTED, _started("b"), seq=0)
    hooks.flush()
    run_offline(stream_config, duckdb_url, ["delivery"])

    with open_store(duckdb_url) as store:
        report = delivery_report(store)
    assert report.summary["invalid headers"] == 1
    assert any("rlmesh.seq" in note and "-1" in note for note in report.notes)


def test_an_event_topic_the_consumer_reads_is_refused_as_its_dead_letter_topic(
        stream_config: StreamConfig, duckdb_url: str) -> None:
    # its dead letters would be read back and dead-lettered again, for ever
    topic = f"{stream_config.topic_prefix}.{EventType.SESSION_STARTED.value}"
    with pytest.raises(ConsumerError, match=r"dead-letter topic .*event topic"):
        run_offline(stream_config, duckdb_url, ["sessions"], dlq_topic=topic)


def _consume_all(config: StreamConfig, sink: str) -> subprocess.CompletedProcess[str]:
    """`consume all --until-end` in a child: a crash is a return code, not a lost session."""
    return subprocess.run(
        [sys.executable, "-m", "rlmesh_stream.infra.cli", "consume", "all", "--sink", sink,
         "--bootstrap", config.bootstrap, "--registry-url", config.registry_url,
         "--topic-prefix", config.topic_prefix, "--from-beginning", "--until-end", "--quiet"],
        capture_output=True, text=True, timeout=300)


def test_a_record_nesting_thousands_of_lists_under_a_compatible_v2_is_dead_lettered(
        stream_config: StreamConfig, duckdb_url: str) -> None:
    # Another producer registers a compatible v2 (one optional field more) and writes one
    # record whose final_info nests 5 000 MetaLists: fastavro, which reads foreign writer
    # schemas, overflowed the C stack (SIGSEGV on every restart).
    create_topics(stream_config, partitions=1)
    et = EventType.EPISODE_COMPLETED
    topic = et.topic(stream_config.topic_prefix)
    hooks = PlainKafkaHooks(stream_config)
    hooks.publish(et, example(et))
    hooks.flush()
    client = SchemaRegistryClient(stream_config.registry_config())
    v2_id = client.register_schema(subject_name(topic), Schema(json.dumps(v2_schema()), "AVRO"))
    _produce(stream_config, topic, frame(v2_id, deep(5_000) + b"\x00"))

    result = _consume_all(stream_config, duckdb_url)

    assert result.returncode == 0, (result.returncode, result.stderr[-2000:])
    assert query(duckdb_url, "SELECT record_offset FROM dead_letters") == [(1,)]
    assert query(duckdb_url, "SELECT count(*) FROM episodes") == [(1,)]


def test_varints_outside_the_avro_long_range_are_dead_lettered_and_ingestion_goes_on(
        stream_config: StreamConfig, duckdb_url: str) -> None:
    # 10-byte varints decoding to 2^64+7, 2^63, -2^63-1 were read as Python ints and
    # stalled every builder (OverflowError) for good; Avro's long is 64-bit.
    create_topics(stream_config, partitions=1)
    et = EventType.EPISODE_COMPLETED
    topic = et.topic(stream_config.topic_prefix)
    hooks = PlainKafkaHooks(stream_config)
    hooks.publish(et, example(et))
    hooks.flush()
    sid = hooks.serializer.registrar.schema_id(et)
    for value in (2**64 + 7, 2**63, -(2**63) - 1):
        _produce(stream_config, topic, frame(sid, out_of_range(value)))

    result = _consume_all(stream_config, duckdb_url)

    assert result.returncode == 0, (result.returncode, result.stderr[-2000:])
    assert query(duckdb_url, "SELECT record_offset FROM dead_letters ORDER BY 1") == [
        (1,), (2,), (3,)]
    assert query(duckdb_url, "SELECT count(*) FROM episodes") == [(1,)]


def test_a_lane_and_env_index_beyond_32_bits_are_stored_as_written(
        stream_config: StreamConfig, sink_url: str) -> None:
    # Avro longs in the schema; the tables' INTEGER columns could not hold them, and the
    # sink's error (ArrowInvalid in DuckDB) stalled the builder for good. A long is BIGINT.
    create_topics(stream_config, partitions=1)
    et = EventType.EPISODE_COMPLETED
    hooks = PlainKafkaHooks(stream_config)
    sid = hooks.serializer.registrar.schema_id(et)
    _produce(stream_config, et.topic(stream_config.topic_prefix),
             frame(sid, with_route_lane_and_env_index(2**35, 2**40)))

    runtime = run_offline(stream_config, sink_url, ["episodes"])

    assert (runtime.events, runtime.dead_letters) == (1, 0)
    assert query(sink_url, "SELECT lane, env_index FROM episodes") == [(2**35, 2**40)]


def test_a_session_id_holding_nul_is_dead_lettered_and_ingestion_goes_on(
        stream_config: StreamConfig, sink_url: str) -> None:
    # PostgreSQL text cannot hold U+0000: its DataError stalled every builder for good.
    # No event string may hold it (the contract): readers refuse it, it is dead-lettered.
    create_topics(stream_config, partitions=1)
    et = EventType.EPISODE_COMPLETED
    hooks = PlainKafkaHooks(stream_config)
    sid = hooks.serializer.registrar.schema_id(et)
    _produce(stream_config, et.topic(stream_config.topic_prefix),
             frame(sid, with_session_id("s\x00nul")))
    hooks.publish(et, example(et))
    hooks.flush()

    runtime = run_offline(stream_config, sink_url, ["episodes"])

    assert runtime.dead_letters == 1
    assert query(sink_url, "SELECT record_offset FROM dead_letters") == [(0,)]
    assert query(sink_url, "SELECT count(*) FROM episodes") == [(1,)]

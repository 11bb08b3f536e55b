"""Records a transactional producer wrote (a Kafka Streams or Flink job writing exactly
once): each transaction's commit marker, and an aborted transaction's records, take
offsets that a read-committed consumer is never handed. An `--until-end` run waited for
them for ever, and the offsets it stored stayed short of the partitions' ends."""

from __future__ import annotations

import subprocess
import sys

import pytest
from confluent_kafka import Consumer, TopicPartition

from rlmesh_stream.schemas.connection.config import StreamConfig
from rlmesh_stream.schemas.contract import events as ev
from rlmesh_stream.schemas.contract.topics import EventType
from tests.consumers.consumer_helpers import PlainKafkaHooks, create_topics, query

pytestmark = pytest.mark.stack

CLI = [sys.executable, "-m", "rlmesh_stream.infra.cli"]
ROUTE = ev.RuntimeEnvContext(env_id="e", env_component_id="ec", model_component_id="m")
ET = EventType.SESSION_STARTED


def _publish_in_transactions(config: StreamConfig) -> None:
    """c0..c4 committed, a0..a2 aborted, c5..c9 committed, on one partition."""
    create_topics(config, partitions=1)
    hooks = PlainKafkaHooks(config, transactional=True)
    for names, commit in ((range(0, 5), True), (range(3), False), (range(5, 10), True)):
        hooks.producer.begin_transaction()
        for i in names:
            sid = f"c{i}" if commit else f"a{i}"
            hooks.publish(ET, ev.SessionStartedEvent(session_id=sid, route=ROUTE, env_id="e"))
        if commit:
            hooks.producer.commit_transaction(30)
        else:
            hooks.flush()  # in the log, then aborted (an abort drops what is unsent)
            hooks.producer.abort_transaction(30)


def _consume(config: StreamConfig, sink: str) -> subprocess.CompletedProcess[str]:
    """`consume sessions --until-end`; the old code never ended (stopped after 60 s)."""
    return subprocess.run(
        [*CLI, "consume", "sessions", "--from-beginning", "--until-end", "--quiet",
         "--sink", sink, "--bootstrap", config.bootstrap, "--topic-prefix",
         config.topic_prefix, "--registry-url", config.registry_url, "--group", "g"],
        capture_output=True, text=True, timeout=60)


def test_an_until_end_run_over_transactions_ends_with_the_committed_records_applied(
    stream_config: StreamConfig, duckdb_url: str,
) -> None:
    _publish_in_transactions(stream_config)

    run = _consume(stream_config, duckdb_url)

    assert run.returncode == 0, run.stderr[-2000:]
    assert query(duckdb_url, "SELECT session_id FROM sessions ORDER BY 1") == [
        (f"c{i}",) for i in range(10)]


def test_the_offsets_stored_after_transactions_are_the_partitions_ends(
    stream_config: StreamConfig, duckdb_url: str,
) -> None:
    """Short of the end, the lag never fell to 0, and a member of a multi-member export
    waiting for the others' stored offsets to reach the end waited for ever."""
    _publish_in_transactions(stream_config)
    topic = ET.topic(stream_config.topic_prefix)
    consumer = Consumer({"bootstrap.servers": stream_config.bootstrap, "group.id": "marks",
                         "isolation.level": "read_committed"})
    try:
        _, end = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
    finally:
        consumer.close()

    run = _consume(stream_config, duckdb_url)

    assert run.returncode == 0, run.stderr[-2000:]
    assert end == 10 + 3 + 3  # 13 records, 3 commit or abort markers
    assert query(duckdb_url, "SELECT next_offset FROM consumer_offsets WHERE topic = "
                             f"'{topic}' AND builder = 'sessions'") == [(end,)]

"""Runs of one group over time: nothing between two runs is skipped, silently or at all.

A topic deleted and recreated holds fewer records than the offset the sink stored for it:
the run refuses with one line naming the partition, and `--reset-recreated` reads it again
from its first record. A partition that was empty during an offline run is read from its
first record by the next live run (its position is stored at the offline run's checkpoint).
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import duckdb
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.schema_registry import SchemaRegistryClient

from rlmesh_stream.consumers.builders import make_builders
from rlmesh_stream.consumers.runtime import ConsumerRuntime, RuntimeOptions
from rlmesh_stream.consumers.sinks import open_sink
from rlmesh_stream.schemas.codec.serde import EventSerializer
from rlmesh_stream.schemas.connection.config import StreamConfig
from rlmesh_stream.schemas.contract import events as ev
from rlmesh_stream.schemas.contract.topics import EventType
from tests.consumers.consumer_helpers import create_topics, query, run_offline

pytestmark = pytest.mark.stack

CLI = str(Path(sys.executable).parent / "rlmesh-stream")
ROUTE = ev.RuntimeEnvContext(env_id="e", env_component_id="ec", model_component_id="m")


def _produce(config: StreamConfig, ids: list[str], partition: int = 0) -> None:
    """`session_started` records for `ids`, into one partition."""
    serializer = EventSerializer(SchemaRegistryClient(config.registry_config()),
                                 topic_prefix=config.topic_prefix)
    producer = Producer(config.kafka_config())
    topic = EventType.SESSION_STARTED.topic(config.topic_prefix)
    for sid in ids:
        event = ev.SessionStartedEvent(session_id=sid, route=ROUTE, env_id="e")
        producer.produce(topic, partition=partition, key=sid.encode(),
                         value=serializer.serialize(event))
    assert producer.flush(30) == 0


def _recreate(config: StreamConfig, topic: str) -> None:
    """Delete `topic` and create it again, empty (retried while the deletion completes)."""
    admin = AdminClient(config.kafka_config())
    admin.delete_topics([topic])[topic].result(30)
    deadline = time.monotonic() + 60
    while True:
        try:
            admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
            return
        except Exception:
            assert time.monotonic() < deadline, f"{topic} could not be created again"
            time.sleep(0.5)


def _consume(config: StreamConfig, sink: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CLI, "consume", "sessions", "--from-beginning", "--until-end", "--quiet",
         "--sink", sink, "--bootstrap", config.bootstrap, "--topic-prefix",
         config.topic_prefix, "--registry-url", config.registry_url, "--group", "g", *extra],
        capture_output=True, text=True, timeout=120)


@pytest.fixture
def recreated(stream_config: StreamConfig, tmp_path: Path) -> str:
    """A sink that applied 5 records of `session_started`, whose topic was then deleted and
    recreated with 3 records: the stored next offset (5) is beyond the new end (3)."""
    create_topics(stream_config, partitions=1)
    sink = f"duckdb://{tmp_path / 'store.duckdb'}"
    _produce(stream_config, [f"old-{i}" for i in range(5)])
    assert _consume(stream_config, sink).returncode == 0
    _recreate(stream_config, EventType.SESSION_STARTED.topic(stream_config.topic_prefix))
    _produce(stream_config, [f"new-{i}" for i in range(3)])
    return sink


def test_a_recreated_topic_is_refused_with_one_line_naming_the_partition(
        stream_config: StreamConfig, recreated: str) -> None:
    result = _consume(stream_config, recreated)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    topic = EventType.SESSION_STARTED.topic(stream_config.topic_prefix)
    assert result.returncode == 1, result.stderr
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    assert f"{topic}[0]" in lines[0] and "recreated" in lines[0], lines[0]
    assert "--reset-recreated" in lines[0], lines[0]
    assert query(recreated, "SELECT count(*) FROM sessions") == [(5,)]


def test_reset_recreated_reads_a_recreated_topic_from_its_first_record(
        stream_config: StreamConfig, recreated: str) -> None:
    result = _consume(stream_config, recreated, "--reset-recreated")
    assert result.returncode == 0, result.stderr
    assert query(recreated, "SELECT count(*) FROM sessions WHERE session_id LIKE 'new-%'"
                 ) == [(3,)]
    topic = EventType.SESSION_STARTED.topic(stream_config.topic_prefix)
    assert query(recreated, "SELECT next_offset FROM consumer_offsets WHERE topic = "
                 f"'{topic}'") == [(3,)]
    again = _consume(stream_config, recreated)  # the stored offset is the new topic's
    assert again.returncode == 0, again.stderr


def test_a_live_run_after_an_offline_one_reads_partitions_that_were_empty(
        stream_config: StreamConfig, duckdb_url: str,
        runtime_thread: Callable[[ConsumerRuntime], threading.Thread]) -> None:
    create_topics(stream_config, partitions=2)
    _produce(stream_config, ["offline-0", "offline-1"], partition=0)
    group = uuid.uuid4().hex
    run_offline(stream_config, duckdb_url, ["sessions"], group_id=group)
    _produce(stream_config, ["between-0", "between-1"], partition=1)  # was empty
    runtime = ConsumerRuntime(stream_config, make_builders(["sessions"]),
                              open_sink(duckdb_url),
                              RuntimeOptions(group_id=group, checkpoint_interval=0.1))
    thread = runtime_thread(runtime)
    deadline = time.monotonic() + 30
    while _between(duckdb_url) != 2:
        assert thread.is_alive() and time.monotonic() < deadline, "records skipped"
        time.sleep(0.2)


def _between(duckdb_url: str) -> int:
    """Sessions applied from the records published between the runs (same process: the
    runtime's database instance is shared)."""
    con = duckdb.connect(duckdb_url.removeprefix("duckdb://"))
    try:
        row = con.execute("SELECT count(*) FROM sessions WHERE session_id LIKE 'between-%'"
                          ).fetchone()
        return int(row[0]) if row else 0
    finally:
        con.close()

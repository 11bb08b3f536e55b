"""`rlmesh-stream tail` on the real stack: decoded events, one line each."""

from __future__ import annotations

import json
import threading
import time
import uuid

import pytest
from click.testing import CliRunner

from rlmesh_stream.consumers.analysis.tail import run_tail
from rlmesh_stream.consumers.analysis.tail_cli import tail
from rlmesh_stream.schemas.connection.config import StreamConfig
from rlmesh_stream.schemas.contract.events import EpisodeCompletedEvent
from rlmesh_stream.schemas.contract.topics import EventType
from tests.analysis.analysis_events import completed

pytestmark = pytest.mark.stack



def publish(config: StreamConfig, events: list[EpisodeCompletedEvent]) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.schema_registry import SchemaRegistryClient

    from rlmesh_stream.schemas.codec.serde import EventSerializer

    serializer = EventSerializer(SchemaRegistryClient(config.registry_config()),
                                 topic_prefix=config.topic_prefix)
    producer = Producer(config.kafka_config())
    topic = EventType.EPISODE_COMPLETED.topic(config.topic_prefix)
    for event in events:
        producer.produce(topic, key=event.session_id.encode(), value=serializer(event))
    assert producer.flush(30) == 0


@pytest.fixture
def topic(stream_config: StreamConfig) -> str:
    from rlmesh_stream.infra.topics import ensure_topics

    name = EventType.EPISODE_COMPLETED.topic(stream_config.topic_prefix)
    ensure_topics(stream_config, partitions=2, replication_factor=1, topics=[name])
    return name


def collect(config: StreamConfig, **options: object) -> list[str]:
    lines: list[str] = []
    run_tail(config, EventType.EPISODE_COMPLETED, lines.append, **options)  # type: ignore[arg-type]
    return lines


def test_from_beginning_prints_every_record_once(stream_config: StreamConfig,
                                                 topic: str) -> None:
    publish(stream_config, [completed("sa", 1), completed("sa", 2), completed("sb", 1)])
    lines = collect(stream_config, from_beginning=True, exit_at_end=True)
    assert sorted((line.split()[1], line.split("episode_record_id=")[1].split()[0])
                  for line in lines) == [("sa", "ep-000001"), ("sa", "ep-000002"),
                                         ("sb", "ep-000001")]


def test_session_filter_keeps_only_that_sessions_events(stream_config: StreamConfig,
                                                        topic: str) -> None:
    publish(stream_config, [completed("sa", 1), completed("sb", 1), completed("sa", 2)])
    lines = collect(stream_config, from_beginning=True, exit_at_end=True, session_id="sa")
    assert [line.split()[1] for line in lines] == ["sa", "sa"]


def test_json_output_carries_the_whole_event(stream_config: StreamConfig, topic: str) -> None:
    publish(stream_config, [completed("sa", 1, reward=2.75)])
    (line,) = collect(stream_config, from_beginning=True, exit_at_end=True, as_json=True)
    doc = json.loads(line)
    assert doc["topic"] == topic and doc["key"] == "sa"
    assert doc["event"]["cumulative_reward"] == 2.75
    assert doc["event"]["route"]["env_id"] == "CartPole-v1"
    assert doc["event"]["final_info"] == {"is_success": True}


def test_count_stops_after_that_many_events(stream_config: StreamConfig, topic: str) -> None:
    publish(stream_config, [completed("sa", i) for i in range(1, 6)])
    assert len(collect(stream_config, from_beginning=True, count=2)) == 2


def test_without_from_beginning_only_new_records_are_printed(stream_config: StreamConfig,
                                                             topic: str) -> None:
    publish(stream_config, [completed("old", 1)])
    lines: list[str] = []
    worker = threading.Thread(target=run_tail, args=(
        stream_config, EventType.EPISODE_COMPLETED, lines.append), kwargs={"count": 1})
    worker.start()
    deadline = time.monotonic() + 60
    while worker.is_alive() and time.monotonic() < deadline:
        publish(stream_config, [completed("new", 1)])  # until the tail is assigned and sees one
        worker.join(1.0)
    assert not worker.is_alive()
    assert lines[0].split()[1] == "new"


def test_cli_prints_lines_from_the_stack(stream_config: StreamConfig, topic: str) -> None:
    publish(stream_config, [completed("sa", 1)])
    result = CliRunner().invoke(tail, [
        "episode_completed", "--from-beginning", "-e",
        "--bootstrap", stream_config.bootstrap, "--registry-url", stream_config.registry_url,
        "--topic-prefix", stream_config.topic_prefix])
    assert result.exit_code == 0, result.output
    assert "sa [env=CartPole-v1 model=ppo] " in result.stdout


def test_a_missing_topic_is_a_clear_error(stream_config: StreamConfig) -> None:
    config = stream_config.with_prefix(f"absent{uuid.uuid4().hex[:8]}")
    result = CliRunner().invoke(tail, [
        "episode_completed", "--bootstrap", config.bootstrap,
        "--registry-url", config.registry_url, "--topic-prefix", config.topic_prefix])
    assert result.exit_code == 1
    assert "does not exist: check --topic-prefix" in result.stderr

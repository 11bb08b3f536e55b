"""`ensure_topics` / `topics create`: the event topics, idempotently, with drift reported."""

from __future__ import annotations

from click.testing import CliRunner
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

from rlmesh_stream.infra.cli import main
from rlmesh_stream.infra.topics import (
    DEFAULT_MAX_MESSAGE_BYTES,
    DEFAULT_RETENTION_MS,
    ensure_topics,
    event_topics,
)
from rlmesh_stream.schemas.connection.config import StreamConfig
from rlmesh_stream.schemas.contract.topics import all_topics


def test_event_topics_are_the_contracts_topics(topic_prefix: str) -> None:
    assert event_topics(topic_prefix) == all_topics(topic_prefix)


def test_ensure_topics_creates_every_event_topic_with_the_settings(
    stream_config: StreamConfig,
) -> None:
    report = ensure_topics(stream_config)

    expected = event_topics(stream_config.topic_prefix)
    assert sorted(report.created) == sorted(expected)
    admin = AdminClient(stream_config.kafka_config())
    metadata = admin.list_topics(timeout=30)
    topic = metadata.topics[expected[0]]
    assert len(topic.partitions) == 12
    assert len(topic.partitions[0].replicas) == min(3, len(metadata.brokers))
    resource = ConfigResource(ResourceType.TOPIC, expected[0])
    configs = admin.describe_configs([resource])[resource].result(30)
    assert configs["retention.ms"].value == str(DEFAULT_RETENTION_MS)
    assert configs["max.message.bytes"].value == str(DEFAULT_MAX_MESSAGE_BYTES)


def test_ensure_topics_again_changes_nothing(stream_config: StreamConfig) -> None:
    ensure_topics(stream_config, partitions=2)
    again = ensure_topics(stream_config, partitions=2)
    assert again.created == [] and again.drift == []
    assert sorted(again.unchanged) == sorted(event_topics(stream_config.topic_prefix))


def test_ensure_topics_reports_a_different_partition_count_as_drift(
    stream_config: StreamConfig,
) -> None:
    topic = event_topics(stream_config.topic_prefix)[0]
    ensure_topics(stream_config, partitions=2, topics=[topic])
    report = ensure_topics(stream_config, partitions=4, topics=[topic])
    assert [(d.topic, d.setting, d.expected, d.actual) for d in report.drift] == [
        (topic, "partitions", "4", "2")]
    admin = AdminClient(stream_config.kafka_config())
    assert len(admin.list_topics(topic, timeout=30).topics[topic].partitions) == 2


def test_topics_create_cli_exits_3_and_prints_drift(stream_config: StreamConfig) -> None:
    ensure_topics(stream_config, partitions=1, retention_ms=3_600_000)
    result = CliRunner().invoke(main, [
        "topics", "create", "--bootstrap", stream_config.bootstrap,
        "--topic-prefix", stream_config.topic_prefix, "--partitions", "1"])
    assert result.exit_code == 3
    assert "retention.ms is 3600000, expected 604800000" in result.stderr
    assert "0 created, 0 unchanged, 13 drifted" in result.stdout

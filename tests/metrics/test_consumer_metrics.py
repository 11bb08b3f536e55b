"""A consumer's Prometheus metrics, scraped over HTTP while it runs live over a fleet:
records read and applied per topic, lag per partition falling to 0, rows written per
table equal to the rows in its tables, one checkpoint timed."""

from __future__ import annotations

import os
import re
import select
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner
from confluent_kafka import Consumer, TopicPartition

from rlmesh_stream.consumers.builders import make_builders
from rlmesh_stream.consumers.consume_cli import consume
from rlmesh_stream.consumers.metrics import ADDR_ENV, ConsumerMetrics
from rlmesh_stream.consumers.runtime import ConsumerRuntime, RuntimeOptions
from rlmesh_stream.consumers.sinks import open_sink
from rlmesh_stream.infra.topics import ensure_topics
from rlmesh_stream.producer.hooks import KafkaRuntimeHooks
from rlmesh_stream.producer.simulator import simulate_fleet
from rlmesh_stream.schemas.connection.config import StreamConfig
from rlmesh_stream.schemas.contract.topics import EventType
from tests.metrics.scrape import Samples, scrape, total, value

pytestmark = pytest.mark.stack

_EPISODE_TOPICS = (EventType.EPISODE_STARTED, EventType.EPISODE_COMPLETED,
                   EventType.SESSION_ENDED, EventType.SESSION_FAILED)


def _records_per_topic(config: StreamConfig) -> dict[str, int]:
    consumer = Consumer({**config.kafka_config(), "group.id": uuid.uuid4().hex})
    try:
        counts = {}
        for et in _EPISODE_TOPICS:
            topic = et.topic(config.topic_prefix)
            parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
            counts[topic] = sum(consumer.get_watermark_offsets(TopicPartition(topic, p))[1]
                                for p in parts)
        return counts
    finally:
        consumer.close()


def _wait_caught_up(port: int, expected: int, deadline_s: float = 120) -> Samples:
    deadline = time.monotonic() + deadline_s
    while True:
        samples = scrape(port)
        lags = samples.get("rlmesh_stream_consumer_lag_records", [])
        if (total(samples, "rlmesh_stream_consumer_records_read_total") == expected
                and lags and all(v == 0 for _, v in lags)):
            return samples
        assert time.monotonic() < deadline, samples
        time.sleep(0.3)


def test_applied_counts_and_rows_written_match_the_tables_and_lag_falls_to_zero(
        stream_config: StreamConfig, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ADDR_ENV, "127.0.0.1")
    ensure_topics(stream_config, partitions=2, replication_factor=1)
    hooks = KafkaRuntimeHooks(config=stream_config)
    simulate_fleet(hooks, sessions=4, lanes=2, episodes=3, seed=5, failure_rate=0.5)
    hooks.close()
    per_topic = _records_per_topic(stream_config)
    group = f"g-{uuid.uuid4().hex[:8]}"
    metrics = ConsumerMetrics(group)
    port = metrics.serve(0)
    sink = open_sink(f"duckdb://{tmp_path / 'tables.duckdb'}")
    # One checkpoint, at stop: every table row is then written exactly once.
    runtime = ConsumerRuntime(stream_config, make_builders(["episodes"]), sink,
                              RuntimeOptions(group_id=group, from_beginning=True,
                                             checkpoint_interval=3600, eager_at_head=False),
                              metrics=metrics)
    run = threading.Thread(target=runtime.run)
    run.start()
    try:
        live = _wait_caught_up(port, sum(per_topic.values()))
        assert total(live, "rlmesh_stream_consumer_records_applied_total") == 0
        assert {labels["partition"] for labels, _ in
                live["rlmesh_stream_consumer_lag_records"]} == {"0", "1"}
    finally:
        runtime.stop()
        run.join(60)
    try:
        done = scrape(port)
        for topic, count in per_topic.items():
            read = value(done, "rlmesh_stream_consumer_records_read_total", topic=topic) \
                if count else 0
            assert read == count, topic
            applied = total(done, "rlmesh_stream_consumer_records_applied_total", topic=topic)
            assert applied == count, topic
        for table in ("episodes", "episode_session_ends"):
            (rows,) = sink.query(f"SELECT count(*) FROM {table}")[0]
            assert value(done, "rlmesh_stream_consumer_rows_written_total",
                         table=table) == rows > 0
        assert value(done, "rlmesh_stream_consumer_checkpoint_duration_seconds_count",
                     group=group) == 1
        assert total(done, "rlmesh_stream_consumer_dead_letters_total") == 0
    finally:
        sink.close()
        metrics.close()


def test_consume_names_a_metrics_port_it_cannot_serve(
        stream_config: StreamConfig, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ADDR_ENV, "127.0.0.1")
    taken = ConsumerMetrics("other")
    port = taken.serve(0)
    try:
        result = CliRunner().invoke(consume, [
            "episodes", "--bootstrap", stream_config.bootstrap,
            "--registry-url", stream_config.registry_url,
            "--topic-prefix", stream_config.topic_prefix,
            "--sink", f"duckdb://{tmp_path / 't.duckdb'}", "--until-end", "--quiet",
            "--metrics-port", str(port)])
    finally:
        taken.close()
    assert result.exit_code == 1
    assert f"Error: cannot serve metrics on port {port}" in result.output
    assert "Traceback" not in result.output


def test_consume_on_metrics_port_0_prints_the_address_and_port_it_serves(
        stream_config: StreamConfig, tmp_path: Path) -> None:
    ensure_topics(stream_config, partitions=1, replication_factor=1)
    env = {k: v for k, v in os.environ.items() if k != ADDR_ENV}  # the default address
    cli = str(Path(sys.executable).parent / "rlmesh-stream")
    proc = subprocess.Popen(
        [cli, "consume", "sessions", "--bootstrap", stream_config.bootstrap,
         "--registry-url", stream_config.registry_url, "--topic-prefix",
         stream_config.topic_prefix, "--sink", f"duckdb://{tmp_path / 't.duckdb'}",
         "--quiet", "--metrics-port", "0"],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env)
    try:
        assert proc.stderr is not None
        ready, _, _ = select.select([proc.stderr], [], [], 60)
        line = proc.stderr.readline() if ready else ""
        found = re.fullmatch(r"serving metrics on http://0\.0\.0\.0:(\d+)/metrics "
                             r"\(all interfaces; set RLMESH_STREAM_METRICS_ADDR to bind one\)",
                             line.strip())
        assert found, line
        port = int(found[1])
        assert port != 0
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
            assert "rlmesh_stream_consumer_records_read_total" in answer.read().decode()
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_a_partition_no_longer_assigned_loses_its_lag_series() -> None:
    metrics = ConsumerMetrics("g")
    metrics.tick(lambda: {("t", 0): 5, ("t", 1): 0}, force=True)
    metrics.tick(lambda: {("t", 1): 2}, force=True)
    lags = {s.labels["partition"]: s.value for s in metrics.lag.collect()[0].samples}
    assert lags == {"1": 2}

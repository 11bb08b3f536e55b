"""Crash safety: a builder process killed with SIGKILL at random moments during a 100k-event
ingestion, and restarted each time, ends with tables identical to a clean run's."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from consumer_helpers import PlainKafkaHooks, create_topics, query, run_offline

from rlmesh_stream.producer.simulator import simulate_fleet
from rlmesh_stream.schemas.connection.config import StreamConfig
from rlmesh_stream.schemas.contract.topics import all_topics

pytestmark = [pytest.mark.stack, pytest.mark.slow]

PARTITIONS = 4
KILLS = 10
KILL_BEFORE = 2 / 3  # every kill point within this share of the events
TABLES = {
    "episodes": "*", "episode_session_ends": "*", "sessions": "*", "advisories": "*",
    "telemetry_rollups": "*", "telemetry_sessions": "*", "delivery_sequences": "*",
    "consumer_offsets": "builder, topic, partition_id, next_offset",
}


def _snapshot(url: str) -> dict[str, list[str]]:
    return {t: sorted(repr(r) for r in query(url, f"SELECT {cols} FROM {t}"))
            for t, cols in TABLES.items()}


def _committed(config: StreamConfig, group: str) -> int:
    """Total offsets the group committed to Kafka (the runtime does so after each checkpoint)."""
    consumer = Consumer({**config.kafka_config(), "group.id": group})
    try:
        parts = [TopicPartition(t, p) for t in all_topics(config.topic_prefix)
                 for p in range(PARTITIONS)]
        return sum(max(tp.offset, 0) for tp in consumer.committed(parts, timeout=10))
    finally:
        consumer.close()


def _consume_command(config: StreamConfig, sink: str, group: str) -> list[str]:
    return [sys.executable, "-m", "rlmesh_stream.infra.cli", "consume", "all", "--sink", sink,
            "--bootstrap", config.bootstrap, "--registry-url", config.registry_url,
            "--topic-prefix", config.topic_prefix, "--group", group, "--instance-id", "crashy",
            "--from-beginning", "--until-end", "--max-batch", "2000",
            "--checkpoint-interval", "0.2", "--quiet"]


def test_sigkill_at_random_moments_leaves_tables_identical_to_a_clean_run(
    stream_config: StreamConfig, tmp_path: Path,
) -> None:
    create_topics(stream_config, partitions=PARTITIONS)
    hooks = PlainKafkaHooks(stream_config)
    manifest = simulate_fleet(hooks, sessions=720, lanes=4, episodes=5, seed=5, window_every=5)
    hooks.flush()
    assert manifest.total_events >= 100_000

    clean = f"duckdb://{tmp_path / 'clean.duckdb'}"
    run_offline(stream_config, clean, ["all"])

    crashed = f"duckdb://{tmp_path / 'crashed.duckdb'}"
    group = f"crash-{uuid.uuid4().hex[:8]}"
    command = _consume_command(stream_config, crashed, group)
    rng = random.Random(os.getpid())
    kills = 0
    progress: list[int] = []
    while kills < KILLS:
        before = _committed(stream_config, group)
        # Each run is killed at a random moment once it has committed a random share of
        # what is left, before the last third of the history, for the kills still to come:
        # however fast the consumer, the ten kills all land mid-ingestion (a checkpoint
        # overshoots its target by up to a batch and the reading goes on until the kill).
        share = max(0, KILL_BEFORE * manifest.total_events - before) / (KILLS - kills + 1)
        target = before + max(1, int(rng.uniform(0.1, 1.0) * share))
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 60
        while _committed(stream_config, group) < target and proc.poll() is None:
            assert time.monotonic() < deadline, "the kill point not reached within 60s"
            time.sleep(0.02)
        time.sleep(rng.uniform(0.0, 0.05))  # a random moment after that checkpoint
        if proc.poll() is not None:
            break  # ingestion finished before this kill
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        kills += 1
        progress.append(_committed(stream_config, group))
    assert kills == KILLS, f"ingestion finished after only {kills} kills"
    assert progress == sorted(set(progress))  # every run got further than the one before
    assert progress[-1] < manifest.total_events  # and the last kill was mid-ingestion

    final = subprocess.run(command, capture_output=True, timeout=300)
    assert final.returncode == 0, final.stderr.decode()[-2000:]
    assert _snapshot(crashed) == _snapshot(clean)
    assert query(crashed, "SELECT records, duplicates, gaps FROM delivery_producers") == [
        (manifest.total_events, 0, 0)]



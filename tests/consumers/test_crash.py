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
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from rlmesh_stream.producer.simulator import simulate_fleet
from rlmesh_stream.schemas.connection.config import StreamConfig
from rlmesh_stream.schemas.contract.topics import all_topics
from tests.consumers.consumer_helpers import (
    PlainKafkaHooks,
    create_topics,
    query,
    run_offline,
    snapshot,
)

pytestmark = [pytest.mark.stack, pytest.mark.slow]

PARTITIONS = 4
KILLS = 10
KILL_BEFORE = 2 / 3  # every kill point within this share of the events


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


class _InTransactions:
    """The simulator's events published in transactions of `size` events, each followed by
    an aborted one (as a Kafka Streams or Flink job copying the events exactly once
    writes them): commit markers and aborted records take offsets no read-committed
    consumer is handed."""

    def __init__(self, config: StreamConfig, size: int) -> None:
        self.hooks = PlainKafkaHooks(config, transactional=True)
        self.size, self.count = size, 0
        self.hooks.producer.begin_transaction()

    def __getattr__(self, name: str) -> Callable[[Any], None]:
        publish = getattr(self.hooks, name)

        def published(event: Any) -> None:
            publish(event)
            self.count += 1
            if self.count % self.size == 0:
                self.end()
                self.hooks.producer.begin_transaction()
        return published

    def end(self) -> None:
        producer = self.hooks.producer
        producer.commit_transaction(30)
        producer.begin_transaction()
        for topic, key in {(et.topic(self.hooks.config.topic_prefix), e.session_id)
                           for et, e in self.hooks.sent[-self.size:]}:
            producer.produce(topic, b"never read", key.encode())
        assert producer.flush(30) == 0  # in the log, then aborted
        producer.abort_transaction(30)


def _kill_repeatedly(config: StreamConfig, command: list[str], group: str, offsets: int,
                     kills: int) -> list[int]:
    """Run `command` `kills` times, each killed with SIGKILL at a random moment once it has
    committed a random share of what is left (the group's offsets), before the last third
    of the topics' `offsets`; the offsets committed after each kill."""
    rng = random.Random(os.getpid())
    progress: list[int] = []
    while len(progress) < kills:
        before = _committed(config, group)
        # however fast the consumer, the kills all land mid-ingestion (a checkpoint
        # overshoots its target by up to a batch and the reading goes on until the kill)
        share = max(0, KILL_BEFORE * offsets - before) / (kills - len(progress) + 1)
        target = before + max(1, int(rng.uniform(0.1, 1.0) * share))
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 60
        while _committed(config, group) < target and proc.poll() is None:
            assert time.monotonic() < deadline, "the kill point not reached within 60s"
            time.sleep(0.02)
        time.sleep(rng.uniform(0.0, 0.05))  # a random moment after that checkpoint
        if proc.poll() is not None:
            break  # ingestion finished before this kill
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        progress.append(_committed(config, group))
    assert len(progress) == kills, f"ingestion finished after only {len(progress)} kills"
    assert progress == sorted(set(progress))  # every run got further than the one before
    return progress


def _crashed_like_clean(config: StreamConfig, tmp_path: Path, total: int, kills: int
                        ) -> tuple[str, list[int]]:
    """`consume all` killed `kills` times then run to the end, against one clean run: the
    same tables, and the delivery check's `total` records with no duplicate or gap. The
    crashed store's URL and the offsets committed after each kill."""
    clean = f"duckdb://{tmp_path / 'clean.duckdb'}"
    run_offline(config, clean, ["all"])
    crashed = f"duckdb://{tmp_path / 'crashed.duckdb'}"
    group = f"crash-{uuid.uuid4().hex[:8]}"
    command = _consume_command(config, crashed, group)
    # the kill points are offsets: a transactional producer's markers and aborted records
    # take some too
    offsets = sum(_ends(config).values())
    progress = _kill_repeatedly(config, command, group, offsets, kills)

    final = subprocess.run(command, capture_output=True, timeout=300)
    assert final.returncode == 0, final.stderr.decode()[-2000:]
    assert snapshot(crashed) == snapshot(clean)
    assert query(crashed, "SELECT records, duplicates, gaps FROM delivery_producers") == [
        (total, 0, 0)]
    return crashed, progress


def test_sigkill_at_random_moments_leaves_tables_identical_to_a_clean_run(
    stream_config: StreamConfig, tmp_path: Path,
) -> None:
    create_topics(stream_config, partitions=PARTITIONS)
    hooks = PlainKafkaHooks(stream_config)
    manifest = simulate_fleet(hooks, sessions=720, lanes=4, episodes=5, seed=5, window_every=5)
    hooks.flush()
    assert manifest.total_events >= 100_000

    _, progress = _crashed_like_clean(stream_config, tmp_path, manifest.total_events, KILLS)

    assert progress[-1] < manifest.total_events  # the last kill was mid-ingestion


def test_sigkill_over_a_transactional_producers_records_loses_and_repeats_nothing(
    stream_config: StreamConfig, tmp_path: Path,
) -> None:
    """The offsets a read-committed consumer is never handed (markers, aborted records)
    are stored as each partition's end is reached; a kill between the two must neither
    skip a record nor apply one twice, and the last run must still end."""
    create_topics(stream_config, partitions=PARTITIONS)
    publisher = _InTransactions(stream_config, size=1000)
    manifest = simulate_fleet(publisher, sessions=300, lanes=4, episodes=5, seed=6,
                              window_every=5)
    publisher.end()
    assert manifest.total_events >= 40_000  # a run reads ~0.2 s past each kill point

    crashed, _ = _crashed_like_clean(stream_config, tmp_path, manifest.total_events, kills=3)

    # every builder of a partition stored its end, past the last marker
    stored = query(crashed, "SELECT topic, partition_id, min(next_offset), max(next_offset) "
                            "FROM consumer_offsets GROUP BY ALL")
    assert {(t, p): {low, high} for t, p, low, high in stored} == {
        tp: {end} for tp, end in _ends(stream_config).items() if end}


def _ends(config: StreamConfig) -> dict[tuple[str, int], int]:
    """Each partition's end as a read-committed consumer sees it (past the last marker)."""
    consumer = Consumer({**config.kafka_config(), "group.id": "ends",
                         "isolation.level": "read_committed"})
    try:
        return {(t, p): consumer.get_watermark_offsets(TopicPartition(t, p), timeout=10)[1]
                for t in all_topics(config.topic_prefix) for p in range(PARTITIONS)}
    finally:
        consumer.close()

"""A PostgreSQL server restarted under a running `consume all --sink postgresql://...`: the
consumer reconnects with back-off, and its tables end as a clean run's, no row lost or
applied twice.

The server is this test's own (`restartable_postgres`): stopped with `pg_ctl stop -m fast`
(every client disconnected, open transactions rolled back, as a restart or a failover
does) once the consumer has checkpointed part of the topics, kept down for a few
seconds (longer than the checkpoint writer's quick retries), then started again on the
same port.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path

import psycopg
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
from tests.pg_server import ThrowawayPostgres

pytestmark = [pytest.mark.stack, pytest.mark.postgres]

PARTITIONS = 4
DOWN_S = 6.0  # how long the server stays down


def _database(server: ThrowawayPostgres, name: str) -> str:
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return server.dsn.rpartition("/")[0] + f"/{name}"


def _committed(config: StreamConfig, group: str) -> int:
    """The offsets the group committed to Kafka (after each checkpoint the sink took)."""
    consumer = Consumer({**config.kafka_config(), "group.id": group})
    try:
        parts = [TopicPartition(t, p) for t in all_topics(config.topic_prefix)
                 for p in range(PARTITIONS)]
        return sum(max(tp.offset, 0) for tp in consumer.committed(parts, timeout=10))
    finally:
        consumer.close()


def test_a_postgres_restart_mid_run_loses_and_repeats_nothing(
    stream_config: StreamConfig, restartable_postgres: ThrowawayPostgres, tmp_path: Path,
) -> None:
    create_topics(stream_config, partitions=PARTITIONS)
    hooks = PlainKafkaHooks(stream_config)
    manifest = simulate_fleet(hooks, sessions=400, lanes=4, episodes=5, seed=11,
                              window_every=5)
    hooks.flush()
    clean = _database(restartable_postgres, "clean")
    run_offline(stream_config, clean, ["all"])
    restarted = _database(restartable_postgres, "restarted")
    group = f"restart-{uuid.uuid4().hex[:8]}"
    consumer = subprocess.Popen(
        [sys.executable, "-m", "rlmesh_stream.infra.cli", "consume", "all", "--sink", restarted,
         "--bootstrap", stream_config.bootstrap, "--registry-url", stream_config.registry_url,
         "--topic-prefix", stream_config.topic_prefix, "--group", group, "--from-beginning",
         "--until-end", "--max-batch", "1000", "--checkpoint-interval", "0.2", "--quiet"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while _committed(stream_config, group) < manifest.total_events // 4:
            assert consumer.poll() is None, consumer.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "a quarter not checkpointed within 120 s"
            time.sleep(0.05)
        restartable_postgres.stop("fast")
        at_stop = _committed(stream_config, group)
        time.sleep(DOWN_S)
        assert consumer.poll() is None, consumer.communicate()[1][-3000:]  # still waiting
        restartable_postgres.start()
        _, stderr = consumer.communicate(timeout=300)
    finally:
        if consumer.poll() is None:
            consumer.kill()
            consumer.wait()

    assert consumer.returncode == 0, stderr[-3000:]
    assert at_stop < manifest.total_events  # the restart came mid-run
    assert "PostgreSQL" in stderr and "reconnect" in stderr  # it did have to wait
    assert snapshot(restarted) == snapshot(clean)
    assert query(restarted, "SELECT records, duplicates, gaps FROM delivery_producers") == [
        (manifest.total_events, 0, 0)]

"""Scaling out: two processes of one builder in one group share a PostgreSQL store, split the
partitions between them, and build the same tables as one process does."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator

import psycopg
import pytest
from confluent_kafka.admin import AdminClient
from consumer_helpers import PlainKafkaHooks, create_topics, query, run_offline

from producer.simulator import simulate_fleet
from schemas.config import StreamConfig

pytestmark = [pytest.mark.stack, pytest.mark.postgres]

PARTITIONS = 4
TABLES = {
    "episodes": "*", "sessions": "*", "advisories": "*", "telemetry_rollups": "*",
    "telemetry_sessions": "*", "delivery_sequences": "*",
    "consumer_offsets": "builder, topic, partition_id, next_offset",
}


@pytest.fixture
def second_database(postgres: str) -> Iterator[str]:
    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    yield f"{postgres.rpartition('/')[0]}/{name}"
    with psycopg.connect(postgres, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def _snapshot(url: str) -> dict[str, list[str]]:
    return {t: sorted(repr(r) for r in query(url, f"SELECT {cols} FROM {t}"))
            for t, cols in TABLES.items()}


def _wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_two_processes_in_one_group_split_partitions_and_match_one_process(
    stream_config: StreamConfig, postgres_dsn: str, second_database: str,
) -> None:
    create_topics(stream_config, partitions=PARTITIONS)
    group = f"scale-{uuid.uuid4().hex[:8]}"
    command = [sys.executable, "-m", "infra.cli", "consume", "all", "--sink", second_database,
               "--bootstrap", stream_config.bootstrap,
               "--registry-url", stream_config.registry_url,
               "--topic-prefix", stream_config.topic_prefix, "--group", group,
               "--from-beginning", "--checkpoint-interval", "0.2", "--quiet"]
    procs = [subprocess.Popen(command, stderr=subprocess.PIPE) for _ in range(2)]
    try:
        admin = AdminClient(stream_config.kafka_config())

        def both_hold_partitions() -> bool:
            desc = admin.describe_consumer_groups([group])[group].result(timeout=10)
            return len(desc.members) == 2 and all(
                m.assignment.topic_partitions for m in desc.members)

        _wait_for(both_hold_partitions, 90, "both processes to hold partitions")
        hooks = PlainKafkaHooks(stream_config)  # the fleet runs while both consume it live
        manifest = simulate_fleet(hooks, sessions=150, lanes=4, episodes=5, seed=9,
                                  window_every=5)
        hooks.flush()
        _wait_for(lambda: query(second_database, "SELECT records FROM delivery_producers")
                  == [(manifest.total_events,)], 120, "every event to be applied")
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        errors = [proc.communicate(timeout=60)[1].decode()[-2000:] for proc in procs]
    assert [p.returncode for p in procs] == [0, 0], errors

    run_offline(stream_config, postgres_dsn, ["all"])  # the one-process reference
    writers = query(second_database, "SELECT written_by FROM consumer_offsets "
                                     "WHERE builder = 'episodes'")
    assert {int(w.rsplit(":", 1)[1]) for (w,) in writers} == {p.pid for p in procs}
    two, one = _snapshot(second_database), _snapshot(postgres_dsn)
    for table in TABLES:
        only_two = sorted(set(two[table]) - set(one[table]))[:3]
        only_one = sorted(set(one[table]) - set(two[table]))[:3]
        assert two[table] == one[table], (table, only_two, only_one)

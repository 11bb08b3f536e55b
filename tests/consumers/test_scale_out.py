"""Scaling out: two processes of one builder in one group share a PostgreSQL store, split the
partitions between them, and build the same tables as one process does."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from consumer_helpers import PlainKafkaHooks, create_topics, query, run_offline

from producer.simulator import simulate_fleet
from schemas.config import StreamConfig

pytestmark = [pytest.mark.stack, pytest.mark.postgres]

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


def test_two_processes_in_one_group_split_partitions_and_match_one_process(
    stream_config: StreamConfig, postgres_dsn: str, second_database: str,
) -> None:
    create_topics(stream_config, partitions=4)
    hooks = PlainKafkaHooks(stream_config)
    simulate_fleet(hooks, sessions=150, lanes=4, episodes=5, seed=9, window_every=5)
    hooks.flush()

    run_offline(stream_config, postgres_dsn, ["all"])  # the one-process reference

    command = [sys.executable, "-m", "infra.cli", "consume", "all", "--sink", second_database,
               "--bootstrap", stream_config.bootstrap,
               "--registry-url", stream_config.registry_url,
               "--topic-prefix", stream_config.topic_prefix, "--group", uuid.uuid4().hex,
               "--from-beginning", "--until-end", "--max-batch", "2000", "--quiet"]
    procs = [subprocess.Popen(command, stderr=subprocess.PIPE) for _ in range(2)]
    for proc in procs:
        _, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err.decode()[-2000:]

    writers = query(second_database, "SELECT topic, partition_id, written_by "
                                     "FROM consumer_offsets WHERE builder = 'episodes'")
    assert len(writers) == 4 * 4  # 4 partitions of each of the episodes builder's topics
    assert {int(w.rsplit(":", 1)[1]) for _, _, w in writers} == {p.pid for p in procs}
    assert _snapshot(second_database) == _snapshot(postgres_dsn)

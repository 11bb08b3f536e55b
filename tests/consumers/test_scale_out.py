"""Scaling out: two processes of one builder in one group share a PostgreSQL store, split the
partitions between them, and build the same tables as one process does."""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator

import psycopg
import pytest
from confluent_kafka.admin import AdminClient

from rlmesh_stream.consumers.builders import make_builders
from rlmesh_stream.consumers.runtime import CheckpointInfo, ConsumerRuntime, RuntimeOptions
from rlmesh_stream.consumers.sinks import open_sink
from rlmesh_stream.producer.simulator import simulate_fleet
from rlmesh_stream.schemas.connection.config import StreamConfig
from tests.consumers.consumer_helpers import PlainKafkaHooks, create_topics, query, run_offline

pytestmark = [pytest.mark.stack, pytest.mark.postgres]

PARTITIONS = 4
TABLES = {
    "episodes": "*", "sessions": "*", "advisories": "*", "telemetry_rollups": "*",
    "telemetry_sessions": "*", "delivery_sequences": "*",
    "consumer_offsets": "builder, topic, partition_id, next_offset",
}

CLI = [sys.executable, "-m", "rlmesh_stream.infra.cli"]


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
    command = [*CLI, "consume", "all", "--sink", second_database,
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


def test_until_end_stops_a_process_the_group_left_without_partitions(
    stream_config: StreamConfig, postgres_dsn: str, caplog: pytest.LogCaptureFixture,
) -> None:
    """Two --until-end processes of one group over a 1-partition topic: the one holding
    no partition stops once the group has settled (saying so), the other once it is at the
    end, and the table is exactly right."""
    create_topics(stream_config, partitions=1)
    hooks = PlainKafkaHooks(stream_config)
    manifest = simulate_fleet(hooks, sessions=30, lanes=2, episodes=3, seed=4, window_every=5)
    hooks.flush()
    expected = {(s.session_id, a.leg, a.severity, a.message): 1
                for s in manifest.sessions for a in s.advisories}
    assert expected
    group = f"idle-{uuid.uuid4().hex[:8]}"
    runtimes: dict[str, ConsumerRuntime] = {}
    errors: list[BaseException] = []
    owner_may_finish = threading.Event()

    def hold_first_checkpoint(_: CheckpointInfo) -> None:
        # the owner stays in the group, its partition unfinished, until the other one stopped
        owner_may_finish.wait(timeout=120)

    def run(name: str, on_checkpoint: Callable[[CheckpointInfo], None] | None) -> None:
        sink = open_sink(postgres_dsn)
        runtime = ConsumerRuntime(
            stream_config, make_builders(["advisories"]), sink,
            RuntimeOptions(group_id=group, from_beginning=True, until_end=True,
                           checkpoint_interval=0.2, settle_time=3.0),
            on_checkpoint=on_checkpoint)
        runtimes[name] = runtime
        try:
            runtime.run()
        except BaseException as exc:  # reported by the test thread
            errors.append(exc)
        finally:
            sink.close()

    caplog.set_level(logging.WARNING, logger="rlmesh_stream.consumers.runtime")
    owner = threading.Thread(target=run, args=("owner", hold_first_checkpoint), daemon=True)
    owner.start()
    _wait_for(lambda: "owner" in runtimes and bool(runtimes["owner"].assignment), 60,
              "the first process to hold the partition")
    idle = threading.Thread(target=run, args=("idle", None), daemon=True)
    started = time.monotonic()
    idle.start()
    idle.join(timeout=90)
    owner_may_finish.set()
    assert not idle.is_alive(), "the process without partitions did not stop"
    assert time.monotonic() - started >= 3.0  # it waited for the group to settle
    owner.join(timeout=90)
    assert not owner.is_alive(), "the process holding the partition did not stop"
    assert errors == []
    assert runtimes["idle"].events == 0
    assert runtimes["owner"].events == sum(len(s.advisories) for s in manifest.sessions)
    stopped = [r.getMessage() for r in caplog.records if "nothing to read, stopping" in
               r.getMessage()]
    assert len(stopped) == 1, stopped
    rows = query(postgres_dsn, "SELECT session_id, leg, severity, message, count "
                               "FROM advisories")
    assert {r[:4]: r[4] for r in rows} == expected

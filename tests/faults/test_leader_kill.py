"""SIGKILL the broker leading a busy partition mid-stream, restart it later: nothing lost or
duplicated (idempotent producers with acks=all, topics at RF 3 / min ISR 2, consumers
writing rows and offsets in one transaction)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from rlmesh_stream.infra.cluster import LocalCluster
from rlmesh_stream.schemas.contract.topics import EventType
from tests.faults.fault_harness import (
    ConsumerProcess,
    FaultTable,
    ProducerRun,
    fresh_database,
    scenario_config,
    verdict,
    wait_caught_up,
    wait_until,
)

pytestmark = pytest.mark.timeout(600)


def test_killing_the_leader_of_a_busy_partition_loses_and_duplicates_nothing(
    cluster: LocalCluster, postgres_dsn: str, fault_table: FaultTable, tmp_path: Path,
) -> None:
    config = scenario_config(cluster.bootstrap, cluster.registry_url)
    sink = fresh_database(postgres_dsn)
    group = f"rlmesh-stream.{config.topic_prefix.split('.')[0]}"
    consumer = ConsumerProcess(config, sink, group, tmp_path, "a")
    runs = [ProducerRun(config, seed=i, sessions=25, rate=250) for i in range(2)]
    for run in runs:
        run.start()
    busy = EventType.STEP_COMPLETED.topic(config.topic_prefix)
    wait_until("events flowing", lambda: all(r.hooks and r.hooks.stats().delivered > 500
                                             for r in runs), 60, 0.2)
    leader = cluster.leader_of(busy, 0)
    cluster.kill_node(leader)
    accepted_at_kill = sum(r.hooks.stats().accepted for r in runs if r.hooks)
    wait_until("a new leader", lambda: cluster.leader_of(busy, 0) not in (leader, -1), 60, 0.5)
    time.sleep(5)  # keep producing on two brokers
    cluster.start_node(leader)
    for run in runs:
        run.join(300)
    wait_caught_up(config, sink)
    assert consumer.stop() == 0

    v = verdict("leader of a busy partition SIGKILLed mid-stream, restarted later", sink, runs)
    fault_table.add(v)
    assert 0 < accepted_at_kill < v.accepted, "the kill did not happen mid-stream"
    assert (v.lost, v.duplicates, v.counted_drops) == (0, 0, 0)
    assert v.episodes == v.expected_episodes

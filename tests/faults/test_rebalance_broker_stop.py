"""A broker stopped during consumer-group rebalances (a consumer joining, then one leaving).

The stopped broker is the group's coordinator, so the group must find a new
one while partitions move between members; the members share one
PostgreSQL sink whose stored offsets make each record apply exactly once
whichever member reads it.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from rlmesh_stream.infra.cluster import LocalCluster
from tests.faults.fault_harness import (
    ConsumerProcess,
    FaultTable,
    ProducerRun,
    fresh_database,
    group_progress,
    scenario_config,
    verdict,
    wait_caught_up,
    wait_until,
)

pytestmark = pytest.mark.timeout(600)


def coordinator_of(bootstrap: str, group: str) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    description = admin.describe_consumer_groups([group])[group].result(timeout=10)
    return int(description.coordinator.id)


def test_a_broker_stopped_while_consumers_join_and_leave_loses_and_duplicates_nothing(
    cluster: LocalCluster, postgres_dsn: str, fault_table: FaultTable, tmp_path: Path,
) -> None:
    config = scenario_config(cluster.bootstrap, cluster.registry_url)
    sink = fresh_database(postgres_dsn)
    group = f"rlmesh-stream.{config.topic_prefix.split('.')[0]}"
    first = ConsumerProcess(config, sink, group, tmp_path, "first")
    runs = [ProducerRun(config, seed=10 + i, sessions=30, rate=200) for i in range(2)]
    for run in runs:
        run.start()
    wait_until("the first consumer committing",
               lambda: (group_progress(config, group) or (0, 0))[0] > 1000, 120, 0.5)

    coordinator = coordinator_of(cluster.bootstrap, group)
    second = ConsumerProcess(config, sink, group, tmp_path, "second")  # joins: rebalance
    time.sleep(3)  # the newcomer has subscribed; the group is rebalancing
    cluster.stop_node(coordinator)
    time.sleep(4)
    assert first.stop() == 0  # leaves while the broker is down: another rebalance
    time.sleep(4)
    cluster.start_node(coordinator)
    for run in runs:
        run.join(300)
    wait_caught_up(config, sink)
    assert second.alive()
    assert second.stop() == 0

    v = verdict("group coordinator broker stopped while a consumer joins and another leaves",
                sink, runs)
    fault_table.add(v)
    assert (v.lost, v.duplicates, v.counted_drops) == (0, 0, 0)
    assert v.episodes == v.expected_episodes

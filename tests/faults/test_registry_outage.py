"""The schema registry stopped for 60 s while producers and consumers run.

Producers that know their schema ids go on publishing; a producer started
during the outage (no ids yet) holds its events until the registry answers;
a consumer that has seen the ids goes on building tables, one that has not
(started during the outage) waits, skipping nothing. Afterwards every table
holds every event once.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from rlmesh_stream.infra.cluster import LocalCluster
from tests.faults.fault_harness import (
    ConsumerProcess,
    FaultTable,
    ProducerRun,
    fresh_database,
    group_progress,
    query,
    scenario_config,
    verdict,
    wait_caught_up,
    wait_until,
)

pytestmark = pytest.mark.timeout(900)

OUTAGE_S = float(os.environ.get("RLMESH_STREAM_FAULT_REGISTRY_OUTAGE_S", "60"))


def committed(config: object, group: str) -> int:
    progress = group_progress(config, group)  # type: ignore[arg-type]
    assert progress is not None
    return progress[0]


def episodes(sink: str) -> int:
    return int(query(sink, "SELECT count(*) FROM episodes")[0][0])


def sessions(sink: str) -> int:
    return int(query(sink, "SELECT count(*) FROM sessions")[0][0])


def test_a_registry_outage_delays_only_unknown_schemas_and_loses_nothing(
    cluster: LocalCluster, postgres_dsn: str, fault_table: FaultTable, tmp_path: Path,
) -> None:
    config = scenario_config(cluster.bootstrap, cluster.registry_url)
    tag = config.topic_prefix.split(".")[0]
    sink_a, sink_b = fresh_database(postgres_dsn), fresh_database(postgres_dsn)
    group_a, group_b = f"rlmesh-stream.{tag}-a", f"rlmesh-stream.{tag}-b"
    known = ConsumerProcess(config, sink_a, group_a, tmp_path, "known-ids")
    early = ProducerRun(config, seed=1, sessions=int(12 + OUTAGE_S * 1.1), rate=150)
    early.start()
    wait_until("the first sessions delivered and consumed",
               lambda: bool(early.hooks and early.hooks.stats().delivered > 1500
                            and committed(config, group_a) > 1000), 120)

    cluster.stop_registry()
    outage_started = time.monotonic()
    late = ProducerRun(config, seed=2, sessions=8, rate=150)
    late.start()
    unknown = ConsumerProcess(config, sink_b, group_b, tmp_path, "unknown-ids")
    time.sleep(5)
    assert early.hooks is not None
    delivered_before = early.hooks.stats().delivered
    episodes_before = episodes(sink_a)
    time.sleep(max(0.0, OUTAGE_S - 5 - (time.monotonic() - outage_started)))

    assert late.hooks is not None
    late_stats = late.hooks.stats()
    assert late_stats.accepted > 0 and late_stats.delivered == 0  # new schemas wait
    assert early.hooks.stats().delivered > delivered_before  # cached ids: publishing goes on
    assert episodes(sink_a) > episodes_before  # known ids: tables keep growing
    assert episodes(sink_b) == 0 and sessions(sink_b) == 0  # unknown ids: waits, skips none
    assert unknown.alive() and known.alive()

    cluster.start_registry()
    for run in (early, late):
        run.join(300)
    wait_caught_up(config, sink_a)
    wait_caught_up(config, sink_b)
    assert known.stop() == 0 and unknown.stop() == 0

    v = verdict(f"schema registry stopped for {OUTAGE_S:.0f} s, then restarted", sink_a,
                [early, late])
    fault_table.add(v)
    assert (v.lost, v.duplicates, v.counted_drops) == (0, 0, 0)
    assert v.episodes == v.expected_episodes
    same = "SELECT producer_id, records, duplicates FROM delivery_producers ORDER BY 1"
    assert query(sink_b, same) == query(sink_a, same)
    assert query(sink_b, "SELECT count(*) FROM dead_letters") == [(0,)]

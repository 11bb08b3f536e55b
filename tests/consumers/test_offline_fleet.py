"""End to end on the real stack: a simulated fleet into Kafka, every builder offline into
DuckDB and into PostgreSQL, and the tables equal the simulator's manifest."""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest

from rlmesh_stream.producer.hooks import KafkaRuntimeHooks
from rlmesh_stream.producer.manifest import Manifest
from rlmesh_stream.producer.simulator import simulate_fleet
from rlmesh_stream.schemas.connection.config import StreamConfig
from rlmesh_stream.schemas.contract import events as ev
from rlmesh_stream.schemas.contract.telemetry import Horizon
from rlmesh_stream.schemas.contract.topics import EventType
from tests.consumers.consumer_helpers import create_topics, query, run_offline
from tests.publishing import close_delivered

pytestmark = pytest.mark.stack


@dataclass
class Fleet:
    config: StreamConfig
    manifest: Manifest
    sent: list[tuple[EventType, Any]]
    producer_id: str


class _Recording:
    """Passes each callback on to the real hooks, keeping the events for the expectations."""

    def __init__(self, hooks: KafkaRuntimeHooks) -> None:
        self.hooks = hooks
        self.sent: list[tuple[EventType, Any]] = []

    def __getattr__(self, name: str) -> Any:
        target = getattr(self.hooks, name)

        def call(event: Any) -> None:
            self.sent.append((EventType.of(event), event))
            target(event)

        return call


@pytest.fixture(scope="module")
def fleet(stack: Any) -> Iterator[Fleet]:
    """One simulated fleet for the module, published by the producer's KafkaRuntimeHooks:
    12 sessions of 3 lanes, some failing."""
    config = StreamConfig.from_env(env={}, bootstrap=stack.bootstrap,
                                   registry_url=stack.registry_url,
                                   topic_prefix=f"t{uuid.uuid4().hex[:10]}.rlmesh.runtime")
    create_topics(config, partitions=4)
    hooks = KafkaRuntimeHooks(config=config)
    recording = _Recording(hooks)
    manifest = simulate_fleet(recording, sessions=12, lanes=3, episodes=4, seed=11,
                              failure_rate=0.3, window_every=5)
    close_delivered(hooks)
    yield Fleet(config, manifest, recording.sent, hooks.producer_id)


@pytest.fixture(scope="module", params=[
    "duckdb", pytest.param("postgresql", marks=pytest.mark.postgres)])
def built(fleet: Fleet, request: pytest.FixtureRequest,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Every builder run once offline over the fleet, into each sink kind in turn."""
    if request.param == "duckdb":
        url = f"duckdb://{tmp_path_factory.mktemp('fleet') / 'tables.duckdb'}"
        run_offline(fleet.config, url, ["all"])
        yield url
        return
    server = request.getfixturevalue("postgres")
    name = f"fleet_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    url = f"{server.rpartition('/')[0]}/{name}"
    run_offline(fleet.config, url, ["all"])
    yield url
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def test_every_event_is_applied_once(fleet: Fleet, built: str) -> None:
    assert query(built, "SELECT producer_id, records, gaps, duplicates "
                        "FROM delivery_producers") == [
        (fleet.producer_id, fleet.manifest.total_events, 0, 0)]


def test_episodes_equal_the_manifest(fleet: Fleet, built: str) -> None:
    rows = query(built, "SELECT session_id, episode_record_id, episode_id, status, step_count, "
                        "cumulative_reward, terminated, truncated FROM episodes")
    got = {(r[0], r[1]): r[2:] for r in rows}
    expected = {}
    for e in fleet.manifest.episodes:
        if e.status == "aborted":
            expected[(e.session_id, e.episode_record_id)] = (
                e.episode_id, "abandoned", None, None, None, None)
        else:
            expected[(e.session_id, e.episode_record_id)] = (
                e.episode_id, "completed", e.steps, e.reward, e.status == "terminated",
                e.status == "truncated")
    assert any(e.status == "aborted" for e in fleet.manifest.episodes)
    assert got == expected


def test_sessions_equal_the_manifest(fleet: Fleet, built: str) -> None:
    rows = query(built, "SELECT session_id, status, reason, total_steps, total_episodes, "
                        "lane, started_at IS NOT NULL, ended_at IS NOT NULL, "
                        "env_connected_at IS NOT NULL, model_connected_at IS NOT NULL "
                        "FROM sessions")
    expected = {
        s.session_id: (s.status, s.reason,
                       s.total_steps if s.status == "ended" else None,
                       s.total_episodes if s.status == "ended" else None,
                       s.lane, True, True, True, True)
        for s in fleet.manifest.sessions
    }
    assert {r[0]: r[1:] for r in rows} == expected


def test_advisories_equal_the_manifest(fleet: Fleet, built: str) -> None:
    rows = query(built, "SELECT session_id, leg, severity, message, count FROM advisories")
    expected = {(s.session_id, a.leg, a.severity, a.message): 1
                for s in fleet.manifest.sessions for a in s.advisories}
    assert expected
    assert {r[:4]: r[4] for r in rows} == expected


def test_rollups_count_every_window_row_and_average_by_count(fleet: Fleet, built: str) -> None:
    sums: dict[tuple[str, str, str], list[float]] = defaultdict(lambda: [0, 0.0])
    for et, event in fleet.sent:
        if et is EventType.TELEMETRY_SNAPSHOT and event.snapshot.horizon is Horizon.WINDOW:
            for r in event.snapshot.rows:
                acc = sums[(r.source.op, r.source.component, r.metric.name)]
                acc[0] += r.count
                acc[1] += r.count * r.avg
    rows = query(built, "SELECT op, component, metric, SUM(count), "
                        "CAST(SUM(avg_total) AS DOUBLE PRECISION) / SUM(count) "
                        "FROM telemetry_rollups GROUP BY 1, 2, 3")
    got = {r[:3]: (r[3], pytest.approx(r[4], rel=1e-9)) for r in rows}
    assert got == {k: (v[0], v[1] / v[0]) for k, v in sums.items()}
    window_rows = sum(s.window_rows for s in fleet.manifest.sessions)
    assert query(built, "SELECT SUM(row_count) FROM telemetry_rollups") == [(window_rows,)]


def test_session_telemetry_rows_are_the_session_snapshots(fleet: Fleet, built: str) -> None:
    expected = set()
    for _et, event in fleet.sent:
        if isinstance(event, ev.TelemetrySnapshotEvent) and \
                event.snapshot.horizon is Horizon.SESSION:
            expected |= {(event.session_id, r.source.op, r.source.component, r.metric.name,
                          r.count, r.avg, r.p99) for r in event.snapshot.rows}
    rows = query(built, "SELECT session_id, op, component, metric, count, avg, p99 "
                        "FROM telemetry_sessions")
    assert len(expected) == sum(s.session_rows for s in fleet.manifest.sessions)
    assert set(rows) == expected


def test_running_again_over_the_same_history_changes_nothing(fleet: Fleet, built: str) -> None:
    tables = ["episodes", "sessions", "advisories", "telemetry_rollups", "telemetry_sessions",
              "delivery_producers", "consumer_offsets"]
    before = {t: query(built, f"SELECT * FROM {t} ORDER BY ALL" if "duckdb" in built
                       else f"SELECT * FROM {t}") for t in tables}
    again = run_offline(fleet.config, built, ["all"])
    after = {t: query(built, f"SELECT * FROM {t} ORDER BY ALL" if "duckdb" in built
                      else f"SELECT * FROM {t}") for t in tables}
    assert again.events == 0
    assert {t: sorted(map(repr, v)) for t, v in after.items()} == \
        {t: sorted(map(repr, v)) for t, v in before.items()}


def test_optional_steps_hold_every_lane_step_and_add_up_to_episode_rewards(
    fleet: Fleet, sink_url: str,
) -> None:
    run_offline(fleet.config, sink_url, ["episodes"], steps=True)
    lanes_per_step = sum(len(e.rewards) for et, e in fleet.sent
                         if et is EventType.STEP_COMPLETED)
    assert query(sink_url, "SELECT count(*) FROM steps") == [(lanes_per_step,)]
    rewards: dict[str, float] = defaultdict(float)
    for e in fleet.manifest.episodes:
        rewards[e.session_id] += e.reward
    rows = query(sink_url, "SELECT session_id, SUM(reward) FROM steps GROUP BY 1")
    assert {sid: float(total) for sid, total in rows} == dict(rewards)


def test_each_builder_run_on_its_own_builds_the_same_tables_as_all_in_one(
    fleet: Fleet, built: str, tmp_path: Any,
) -> None:
    if not built.startswith("duckdb"):
        pytest.skip("five more group joins; the sinks' equivalence is shown by the other tests")
    sink_url = f"duckdb://{tmp_path / 'alone.duckdb'}"
    for name in ("episodes", "sessions", "advisories", "telemetry", "delivery"):
        run_offline(fleet.config, sink_url, [name])
    tables = {"episodes": "*", "sessions": "*", "advisories": "*", "telemetry_rollups": "*",
              "telemetry_sessions": "*", "delivery_producers": "*",
              "consumer_offsets": "builder, topic, partition_id, next_offset"}
    for table, columns in tables.items():
        alone = sorted(map(repr, query(sink_url, f"SELECT {columns} FROM {table}")))
        together = sorted(map(repr, query(built, f"SELECT {columns} FROM {table}")))
        assert alone == together, table

"""The builders' rows do not depend on the order or batching of the records they read.

Records are fed straight to the reducers and a real DuckDB sink (no Kafka):
what is tested is the fold from events to rows.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from rlmesh_stream.consumers.builders import (
    AdvisoriesBuilder,
    Builder,
    EpisodesBuilder,
    EpisodesWithStepsBuilder,
    SessionsBuilder,
    TelemetryBuilder,
    reduce,
)
from rlmesh_stream.consumers.runtime.records import Record
from rlmesh_stream.consumers.sinks import SinkBatch, open_sink
from rlmesh_stream.schemas.contract import events as ev
from rlmesh_stream.schemas.contract.telemetry import Horizon, Kind, Metric, Row, Snapshot, Source
from rlmesh_stream.schemas.contract.topics import EventType

T0 = datetime(2026, 1, 1, tzinfo=UTC)
ROUTE = ev.RuntimeEnvContext(env_id="e", env_component_id="ec", model_component_id="m", lane=1)


def _record(event: Any, second: float) -> Record:
    return Record("t", 0, int(second * 10), T0 + timedelta(seconds=second), EventType.of(event),
                  event)


def _started(rid: str) -> ev.EpisodeStartedEvent:
    return ev.EpisodeStartedEvent(session_id="s", route=ROUTE, episode_id=f"id-{rid}",
                                  episode_record_id=rid, episode_index=int(rid[-1]), env_index=0,
                                  started_from_auto_reset=False, seed=7, trial_index=3)


def _completed(rid: str) -> ev.EpisodeCompletedEvent:
    return ev.EpisodeCompletedEvent(session_id="s", route=ROUTE, episode_id=f"id-{rid}",
                                    episode_record_id=rid, episode_index=int(rid[-1]),
                                    env_index=0, step_count=12, cumulative_reward=3.25,
                                    terminated=True, truncated=False, duration_ms=40,
                                    final_info={"is_success": True, "raw": b"\x00"},
                                    success=True, seed=7, trial_index=3, predict_ms=1.5,
                                    step_ms=0.5)


ENDED = ev.SessionEndedEvent(session_id="s", route=ROUTE, reason="done", total_steps=12,
                             total_episodes=1)
FAILED = ev.SessionFailedEvent(session_id="s", route=ROUTE, reason="env crashed")
EPISODE_EVENTS = [_started("ep-000001"), _completed("ep-000001"), _started("ep-000002"), ENDED]


def _build(tmp_path: Any, builder: Builder, batches: list[list[Record]], name: str,
           table: str) -> list[tuple[Any, ...]]:
    sink = open_sink(f"duckdb://{tmp_path / name}.duckdb")
    try:
        for batch in batches:
            reduced = reduce(builder, batch)
            sink.apply(SinkBatch(rows={t: reduced.sorted_rows(t) for t in builder.tables},
                                 after_sql=list(builder.after_sql)))
        return sink.query(f"SELECT * FROM {table} ORDER BY ALL")
    finally:
        sink.close()


def _batches(records: list[Record], cuts: list[int]) -> list[list[Record]]:
    bounds = sorted({0, len(records), *[c % (len(records) + 1) for c in cuts]})
    return [records[a:b] for a, b in itertools.pairwise(bounds)]


IN_ORDER = [_record(e, i) for i, e in enumerate(EPISODE_EVENTS)]


@settings(max_examples=25, deadline=None)
@given(order=st.permutations(range(len(EPISODE_EVENTS))),
       cuts=st.lists(st.integers(0, 10), max_size=3))
def test_episode_rows_are_the_same_in_any_arrival_order_and_batching(
    tmp_path_factory: Any, order: list[int], cuts: list[int],
) -> None:
    tmp = tmp_path_factory.mktemp("ep")
    expected = _build(tmp, EpisodesBuilder(), [IN_ORDER], "a", "episodes")
    shuffled = [IN_ORDER[i] for i in order]
    assert _build(tmp, EpisodesBuilder(), _batches(shuffled, cuts), "b", "episodes") == expected


def test_a_completed_episode_has_every_column_of_both_events(tmp_path: Any) -> None:
    sink_rows = _build(tmp_path, EpisodesBuilder(), [[IN_ORDER[1]], [IN_ORDER[0]]], "x",
                       "episodes")
    sink = open_sink(f"duckdb://{tmp_path / 'x'}.duckdb")
    row = sink.query("SELECT status, step_count, cumulative_reward, success, started_at, "
                     "completed_at, seed, trial_index, started_from_auto_reset, final_info "
                     "FROM episodes WHERE episode_record_id = 'ep-000001'")[0]
    assert len(sink_rows) == 1
    assert row[:9] == ("completed", 12, 3.25, True, T0, T0 + timedelta(seconds=1), 7, 3, False)
    assert row[9] == '{"is_success": true, "raw": "AA=="}'


def test_an_episode_still_running_when_its_session_ends_is_abandoned(tmp_path: Any) -> None:
    rows = _build(tmp_path, EpisodesBuilder(), [IN_ORDER], "x", "episodes")
    statuses = {r[1]: r[12] for r in rows}
    assert statuses == {"ep-000001": "completed", "ep-000002": "abandoned"}


def test_an_episode_read_after_its_session_failed_is_abandoned(tmp_path: Any) -> None:
    batches = [[_record(FAILED, 5)], [_record(_started("ep-000003"), 1)]]
    rows = _build(tmp_path, EpisodesBuilder(), batches, "x", "episodes")
    assert [(r[1], r[12]) for r in rows] == [("ep-000003", "abandoned")]


def test_an_episode_completed_after_its_session_end_was_read_is_completed(tmp_path: Any) -> None:
    batches = [[_record(ENDED, 5), _record(_started("ep-000001"), 1)],
               [_record(_completed("ep-000001"), 2)]]
    rows = _build(tmp_path, EpisodesBuilder(), batches, "x", "episodes")
    assert [(r[1], r[12]) for r in rows] == [("ep-000001", "completed")]


def test_a_session_row_has_its_route_lifecycle_and_end(tmp_path: Any) -> None:
    events = [ev.EnvConnectedEvent(session_id="s", route=ROUTE, env_id="e"),
              ev.ModelConnectedEvent(session_id="s", route=ROUTE),
              ev.SessionStartedEvent(session_id="s", route=ROUTE, env_id="e"), ENDED]
    records = [_record(e, i) for i, e in enumerate(events)]
    rows = _build(tmp_path, SessionsBuilder(), [records[::-1]], "x", "sessions")
    assert rows == [("s", "e", "ec", "m", 1, "ended", "done", 12, 1, T0 + timedelta(seconds=2),
                     T0 + timedelta(seconds=3), T0, T0 + timedelta(seconds=1))]


def test_advisories_are_counted_per_session_leg_severity_and_message(tmp_path: Any) -> None:
    def advisory(message: str) -> ev.RelayAdvisoryEvent:
        return ev.RelayAdvisoryEvent(session_id="s", route=ROUTE, leg=ev.Leg.OBSERVATION,
                                     advisory=ev.Advisory(severity=ev.AdvisorySeverity.CAUTION,
                                                          message=message))

    records = [_record(advisory(m), i) for i, m in enumerate(["a", "b", "a"])]
    rows = _build(tmp_path, AdvisoriesBuilder(), [records[:2], records[2:]], "x", "advisories")
    assert [(r[2], r[3], r[4]) for r in rows] == [("caution", "a", 2), ("caution", "b", 1)]


def _snapshot(horizon: Horizon, count: int, avg: float) -> ev.TelemetrySnapshotEvent:
    row = Row(source=Source(op="env.step", component="env"),
              metric=Metric(name="rpc.total", kind=Kind.DURATION), count=count, avg=avg,
              p50=avg, p95=avg * 2, p99=avg * 3)
    return ev.TelemetrySnapshotEvent(session_id="s", route=ROUTE,
                                     snapshot=Snapshot(horizon=horizon, rows=[row]))


def test_window_snapshots_roll_up_per_tumbling_window(tmp_path: Any) -> None:
    records = [_record(_snapshot(Horizon.WINDOW, 2, 1.0), 1),
               _record(_snapshot(Horizon.WINDOW, 6, 3.0), 50),
               _record(_snapshot(Horizon.WINDOW, 5, 9.0), 61)]
    builder = TelemetryBuilder(window=timedelta(minutes=1))
    _build(tmp_path, builder, [records], "x", "telemetry_rollups")
    sink = open_sink(f"duckdb://{tmp_path / 'x'}.duckdb")
    assert sink.query("SELECT window_start, count, avg, max_p99, lane FROM telemetry_rollups "
                      "ORDER BY window_start") == [
        (T0, 8, 2.5, 9.0, 1), (T0 + timedelta(minutes=1), 5, 9.0, 27.0, 1)]


def test_a_rollup_row_shared_by_sessions_does_not_depend_on_their_order(tmp_path: Any) -> None:
    other = ev.RuntimeEnvContext(env_id="e", env_component_id="ec-2", model_component_id="m",
                                 lane=1)
    first = _record(_snapshot(Horizon.WINDOW, 2, 1.0), 1)
    second = _record(_snapshot(Horizon.WINDOW, 3, 2.0), 2)
    assert isinstance(second.event, ev.TelemetrySnapshotEvent)
    second.event.route = other
    one = _build(tmp_path, TelemetryBuilder(), [[first], [second]], "a", "telemetry_rollups")
    two = _build(tmp_path, TelemetryBuilder(), [[second], [first]], "b", "telemetry_rollups")
    assert one == two


def test_a_percentile_whose_weighted_sum_passes_28_digits_rolls_up(tmp_path: Any) -> None:
    # count 1332 x p99 1.5e16 ~ 2e19: Python's default decimal context raised InvalidOperation
    records = [_record(_snapshot(Horizon.WINDOW, 1332, 5e15), 1)]
    _build(tmp_path, TelemetryBuilder(), [records], "x", "telemetry_rollups")
    sink = open_sink(f"duckdb://{tmp_path / 'x'}.duckdb")
    assert sink.query("SELECT count, avg, max_p99 FROM telemetry_rollups") == [
        (1332, 5e15, 1.5e16)]


def test_a_product_too_large_for_the_rollup_column_is_left_out_of_its_average(
        tmp_path: Any) -> None:
    records = [_record(_snapshot(Horizon.WINDOW, 10, 1e300), 1)]
    _build(tmp_path, TelemetryBuilder(), [records], "x", "telemetry_rollups")
    sink = open_sink(f"duckdb://{tmp_path / 'x'}.duckdb")
    assert sink.query("SELECT count, avg FROM telemetry_rollups") == [(10, None)]


def test_session_snapshot_rows_are_kept_exactly(tmp_path: Any) -> None:
    records = [_record(_snapshot(Horizon.SESSION, 40, 2.5), 1)]
    _build(tmp_path, TelemetryBuilder(), [records], "x", "telemetry_sessions")
    sink = open_sink(f"duckdb://{tmp_path / 'x'}.duckdb")
    assert sink.query("SELECT session_id, op, metric, kind, count, avg, p50, p95, p99 "
                      "FROM telemetry_sessions") == [
        ("s", "env.step", "rpc.total", "Duration", 40, 2.5, 2.5, 5.0, 7.5)]


def test_steps_table_has_a_row_per_lane_of_each_step(tmp_path: Any) -> None:
    def step(n: int, rid: str) -> ev.StepCompletedEvent:
        return ev.StepCompletedEvent(session_id="s", route=ROUTE, episode_id="id",
                                     episode_record_id=rid, step=n, env_index=0,
                                     rewards=[1.0, 0.5], terminated=[False, True],
                                     truncated=[False, False], autoreset_roll=[False, False],
                                     predict_ms=2.0, step_ms=1.0)

    # step 0 of two different primary episodes: two group steps, not one
    records = [_record(step(0, "ep-000001"), 1), _record(step(0, "ep-000002"), 2)]
    rows = _build(tmp_path, EpisodesWithStepsBuilder(), [records], "x", "steps")
    assert [(r[1], r[2], r[4], r[9]) for r in rows] == [
        (10, 0, "ep-000001", 1.0), (10, 1, None, 0.5),
        (20, 0, "ep-000002", 1.0), (20, 1, None, 0.5)]

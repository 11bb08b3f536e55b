"""Lane-driven sessions in the fleet simulator: one session per lane of a shared endpoint."""

from __future__ import annotations

from typing import Any

from rlmesh_stream.producer.manifest import Manifest
from rlmesh_stream.producer.simulator import simulate_fleet


class EventLog:
    """A runtime-hooks sink that keeps every event in call order."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    def __getattr__(self, callback: str) -> Any:
        return lambda event: self.events.append((callback, event))


def _fleet(**kwargs: Any) -> tuple[Manifest, EventLog]:
    log = EventLog()
    params = {"sessions": 4, "lanes": 3, "episodes": 4, "seed": 5, "failure_rate": 0.0,
              **kwargs}
    return simulate_fleet(log, **params), log


def test_lane_driven_sessions_come_after_the_vector_sessions_one_per_lane() -> None:
    manifest, _ = _fleet(lane_driven=3)

    assert [s.lane for s in manifest.sessions] == [None] * 4 + [0, 1, 2]
    assert [s.num_envs for s in manifest.sessions] == [3] * 4 + [1] * 3


def test_lane_driven_sessions_share_one_endpoint() -> None:
    manifest, _ = _fleet(lane_driven=2)

    shared = {s.env_component_id for s in manifest.sessions if s.lane is not None}
    assert shared == {"env-shared"}


def test_every_event_of_a_lane_driven_session_carries_its_lane() -> None:
    manifest, log = _fleet(lane_driven=2)
    lane_of = {s.session_id: s.lane for s in manifest.sessions}

    for _, event in log.events:
        assert event.route.lane == lane_of[event.session_id]


def test_a_lane_driven_session_steps_a_single_lane() -> None:
    manifest, log = _fleet(lane_driven=2)
    lane_driven = {s.session_id for s in manifest.sessions if s.lane is not None}

    steps = [e for name, e in log.events
             if name == "step_completed" and e.session_id in lane_driven]
    assert steps and all(len(e.rewards) == 1 for e in steps)
    assert all(e.env_index == 0 for name, e in log.events
               if name == "episode_started" and e.session_id in lane_driven)


def test_adding_lane_driven_sessions_leaves_the_vector_sessions_unchanged() -> None:
    without, _ = _fleet()
    with_lanes, _ = _fleet(lane_driven=2)

    assert with_lanes.sessions[:4] == without.sessions
    assert [e for e in with_lanes.episodes if e.session_id in
            {s.session_id for s in without.sessions}] == without.episodes

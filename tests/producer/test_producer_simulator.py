"""The fleet simulator: deterministic, faithful event streams, and a manifest that says so."""

from __future__ import annotations

import json
import time
from collections import Counter, defaultdict
from typing import Any

import pytest
from click.testing import CliRunner

from rlmesh_stream.producer.manifest import Manifest
from rlmesh_stream.producer.simulate_cli import simulate
from rlmesh_stream.producer.simulator import simulate_fleet
from rlmesh_stream.schemas.contract import events as ev
from rlmesh_stream.schemas.contract.telemetry import Horizon
from tests.producer.producer_helpers import read_back


class EventLog:
    """A runtime-hooks sink that keeps every event in call order (the simulator's audience)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    def __getattr__(self, callback: str):
        return lambda event: self.events.append((callback, event))


def _fleet(**kwargs: Any) -> tuple[Manifest, EventLog]:
    log = EventLog()
    params = {"sessions": 8, "lanes": 3, "episodes": 5, "seed": 3, **kwargs}
    return simulate_fleet(log, **params), log


def test_the_same_seed_gives_the_same_events_and_manifest():
    first, first_log = _fleet()
    second, second_log = _fleet()

    assert first.to_json() == second.to_json()
    assert first_log.events == second_log.events


def test_a_different_seed_gives_different_events():
    assert _fleet(seed=1)[0].to_json() != _fleet(seed=2)[0].to_json()


def test_the_manifest_round_trips_through_json():
    manifest, _ = _fleet()

    assert Manifest.from_json(manifest.to_json()) == manifest
    assert json.loads(manifest.to_json())["seed"] == 3


def test_manifest_episode_steps_and_rewards_equal_the_per_lane_step_events():
    manifest, log = _fleet()
    steps: Counter[tuple[str, str]] = Counter()
    rewards: defaultdict[tuple[str, str], float] = defaultdict(float)
    lanes_of: dict[str, list[str]] = {}
    for callback, event in log.events:
        if callback == "action_received":
            lanes_of[event.session_id] = event.episode_record_ids
        elif callback == "step_completed":
            for lane, record_id in enumerate(lanes_of[event.session_id]):
                if record_id and not event.autoreset_roll[lane]:
                    steps[(event.session_id, record_id)] += 1
                    rewards[(event.session_id, record_id)] += event.rewards[lane]

    for e in manifest.episodes:
        assert steps[(e.session_id, e.episode_record_id)] == e.steps
        assert rewards[(e.session_id, e.episode_record_id)] == e.reward


def test_every_session_follows_the_runtime_order_and_ends_with_one_session_snapshot():
    manifest, log = _fleet()
    by_session: defaultdict[str, list[tuple[str, Any]]] = defaultdict(list)
    for callback, event in log.events:
        by_session[event.session_id].append((callback, event))

    for session in manifest.sessions:
        calls = [c for c, _ in by_session[session.session_id]]
        assert calls[:4] == ["env_connected", "model_connected", "session_started", "log"]
        final = "session_failed" if session.status == "failed" else "session_ended"
        assert calls[-1] == final and calls.count(final) == 1
        snapshots = [e.snapshot.horizon for c, e in by_session[session.session_id]
                     if c == "on_telemetry"]
        assert snapshots.count(Horizon.SESSION) == 1 and snapshots[-1] is Horizon.SESSION
        assert calls.count("relay_advisory") == len(session.advisories)


def test_next_step_rolls_carry_no_infos_and_start_episodes_without_a_trial_ordinal():
    manifest, log = _fleet(next_step_fraction=1.0, failure_rate=0.0)
    rolls = [e for c, e in log.events if c == "step_completed" and any(e.autoreset_roll)]
    auto_starts = [e for c, e in log.events
                   if c == "episode_started" and e.started_from_auto_reset]

    assert rolls and all(e.infos is None for e in rolls)
    assert auto_starts and all(e.trial_index is None for e in auto_starts)
    assert all(s.autoreset == "next_step" for s in manifest.sessions)


def test_some_sessions_fail_and_their_open_episodes_are_aborted_without_completion():
    manifest, log = _fleet()
    completed = {(e.session_id, e.episode_record_id) for c, e in log.events
                 if c == "episode_completed"}

    assert any(s.status == "failed" for s in manifest.sessions)
    aborted = [e for e in manifest.episodes if e.status == "aborted"]
    assert aborted
    assert not any((e.session_id, e.episode_record_id) in completed for e in aborted)
    assert len(completed) == len(manifest.completed_episodes())


def test_event_counts_in_the_manifest_equal_what_was_emitted():
    manifest, log = _fleet()
    emitted = Counter("telemetry_snapshot" if c == "on_telemetry" else c for c, _ in log.events)

    assert manifest.event_counts == dict(emitted)
    assert all(isinstance(e, tuple(ev.RuntimeEvent.__args__)) for _, e in log.events)


@pytest.mark.stack
def test_the_simulate_command_publishes_the_fleet_and_writes_its_manifest(
    stream_config, tmp_path,
):
    path = tmp_path / "manifest.json"
    result = CliRunner().invoke(simulate, [
        "--sessions", "3", "--lanes", "2", "--episodes", "3", "--seed", "9",
        "--bootstrap", stream_config.bootstrap, "--registry-url", stream_config.registry_url,
        "--topic-prefix", stream_config.topic_prefix, "--manifest", str(path)])

    assert result.exit_code == 0, result.output
    manifest = Manifest.load(path)
    summary = json.loads(result.output.strip().splitlines()[-1])
    landed = read_back(stream_config.bootstrap, stream_config.registry_url,
                       stream_config.topic_prefix, expected=manifest.total_events, decode=False)
    assert summary["delivered"] == manifest.total_events == len(landed)
    assert Counter(r.event_type.value for r in landed) == Counter(manifest.event_counts)


def test_the_rate_option_paces_emission():
    started = time.monotonic()
    manifest, _ = _fleet(sessions=2, lanes=1, episodes=2, rate=2000.0)
    elapsed = time.monotonic() - started

    assert elapsed >= manifest.total_events / 2000.0 * 0.9


def test_a_session_with_no_episode_budget_connects_snapshots_and_ends():
    manifest, log = _fleet(sessions=1, episodes=0, failure_rate=0.0)

    calls = [c for c, _ in log.events]
    assert calls[-2:] == ["on_telemetry", "session_ended"]
    assert manifest.episodes == [] and manifest.sessions[0].status == "ended"


@pytest.mark.stack
def test_the_simulate_command_waits_for_room_instead_of_dropping(
    stream_config, tmp_path, monkeypatch,
):
    # A queue of 200 records fills at once under a fleet of ~10 000 events, and a backlog of
    # 100 while the fresh prefix's topics are created: the load generator waits for room
    # (Kafka delivering) and publishes every event.
    monkeypatch.setenv("RLMESH_STREAM_QUEUE_MAX_MESSAGES", "200")
    monkeypatch.setenv("RLMESH_STREAM_HELD_MAX_EVENTS", "100")
    path = tmp_path / "manifest.json"
    result = CliRunner().invoke(simulate, [
        "--sessions", "24", "--lanes", "4", "--episodes", "20", "--seed", "5",
        "--bootstrap", stream_config.bootstrap, "--registry-url", stream_config.registry_url,
        "--topic-prefix", stream_config.topic_prefix, "--manifest", str(path)])

    summary = json.loads(result.output.strip().splitlines()[0])
    assert summary["dropped"] == 0, result.output
    assert result.exit_code == 0, result.output
    manifest = Manifest.load(path)
    landed = read_back(stream_config.bootstrap, stream_config.registry_url,
                       stream_config.topic_prefix, expected=manifest.total_events, decode=False)
    assert len(landed) == manifest.total_events == summary["delivered"]

"""The rlmesh SDK bridge on a real `rlmesh.run` of Gymnasium CartPole, published to the stack."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import rlmesh
from rlmesh.numpy import Model

from rlmesh_stream.producer.bridge import rlmesh_bridge
from rlmesh_stream.schemas.contract import events as ev
from rlmesh_stream.schemas.contract.telemetry import Horizon
from rlmesh_stream.schemas.contract.topics import EventType
from tests.producer.producer_helpers import read_back

pytestmark = pytest.mark.stack


def _policy(obs: np.ndarray) -> np.int64:
    return np.int64(0) if obs[2] < 0 else np.int64(1)


def _run(make_hooks, stream_config, model: Model, seeds: list[int]):
    hooks = make_hooks()
    bridge = rlmesh_bridge(hooks, env_id="CartPole-v1", model_component_id="numpy-policy")
    error: BaseException | None = None
    result = None
    try:
        result = rlmesh.run(model, gym.make("CartPole-v1"), seeds=seeds, hooks=bridge)
    except Exception as exc:  # the failing-run test wants the run's own error
        error = exc
    hooks.flush(15)
    expected = hooks.stats().delivered
    landed = read_back(stream_config.bootstrap, stream_config.registry_url,
                       stream_config.topic_prefix, expected=expected)
    return bridge, result, error, landed


def test_a_cartpole_run_yields_exactly_the_runs_episodes_steps_and_rewards(
    make_hooks, stream_config,
):
    bridge, result, _, landed = _run(make_hooks, stream_config, Model(_policy), [1, 2, 3])

    completed = sorted((r.event for r in landed if r.event_type is EventType.EPISODE_COMPLETED),
                       key=lambda e: e.episode_index)
    assert [(e.episode_index - 1, e.step_count, e.cumulative_reward, e.seed, e.trial_index,
             e.terminated, e.truncated) for e in completed] == [
        (x.index, x.steps, x.reward, x.seed, x.trial, x.terminated, x.truncated)
        for x in result.episodes]
    steps: Counter[str] = Counter()
    rewards: defaultdict[str, float] = defaultdict(float)
    for r in landed:
        if r.event_type is EventType.STEP_COMPLETED:
            steps[r.event.episode_record_id] += 1
            rewards[r.event.episode_record_id] += r.event.rewards[0]
    assert [(steps[e.episode_record_id], rewards[e.episode_record_id]) for e in completed] == [
        (x.steps, x.reward) for x in result.episodes]
    assert {r.key for r in landed} == {bridge.session_id.encode()}


def test_a_cartpole_run_publishes_its_telemetry_as_the_session_snapshot_then_ends(
    make_hooks, stream_config,
):
    _, result, _, landed = _run(make_hooks, stream_config, Model(_policy), [4])

    (snapshot,) = [r.event for r in landed if r.event_type is EventType.TELEMETRY_SNAPSHOT]
    (ended,) = [r.event for r in landed if r.event_type is EventType.SESSION_ENDED]
    assert snapshot.snapshot.horizon is Horizon.SESSION
    assert [(row.source.op, row.metric.name, row.count) for row in snapshot.snapshot.rows] == [
        (t.op, t.metric, t.count) for t in result.telemetry]
    assert (ended.total_steps, ended.total_episodes) == (result.total_steps, 1)
    assert not [r for r in landed if r.event_type is EventType.SESSION_FAILED]


def test_observation_and_action_leaves_are_the_arrays_bytes_typed_by_the_envs_spaces(
    make_hooks, stream_config,
):
    _, _, _, landed = _run(make_hooks, stream_config, Model(_policy), [5])

    resets = [r.event for r in landed
              if r.event_type is EventType.OBSERVATION_EMITTED and r.event.is_reset]
    (reset,) = resets
    expected_obs, _ = gym.make("CartPole-v1").reset(seed=5)
    assert reset.observation == [np.asarray(expected_obs, dtype="<f4").tobytes()]
    assert list(reset.observation_space.shape) == [4]
    assert reset.observation_space.WhichOneof("spec") == "box"
    first_action = next(r.event for r in landed if r.event_type is EventType.ACTION_RECEIVED)
    assert first_action.action == [np.int64(_policy(expected_obs)).astype("<i8").tobytes()]
    assert first_action.action_space.discrete.n == 2


def test_a_run_that_raises_ends_its_session_as_failed(make_hooks, stream_config):
    calls = {"n": 0}

    def flaky(obs: np.ndarray) -> np.int64:
        calls["n"] += 1
        if calls["n"] > 5:
            raise RuntimeError("policy exploded")
        return _policy(obs)

    _, _, error, landed = _run(make_hooks, stream_config, Model(flaky), [6])

    (failed,) = [r.event for r in landed if r.event_type is EventType.SESSION_FAILED]
    assert error is not None
    assert isinstance(failed, ev.SessionFailedEvent) and "policy exploded" in failed.reason
    assert not [r for r in landed if r.event_type is EventType.SESSION_ENDED]


def test_a_session_run_through_the_bridge_publishes_its_episodes(make_hooks, stream_config):
    hooks = make_hooks()
    bridge = rlmesh_bridge(hooks, env_id="CartPole-v1", model_component_id="numpy-policy")
    with Model(_policy).session(gym.make("CartPole-v1")) as session:
        result = session.run(seeds=[7, 8], hooks=bridge)
    hooks.flush(15)

    landed = read_back(stream_config.bootstrap, stream_config.registry_url,
                       stream_config.topic_prefix, expected=hooks.stats().delivered)

    completed = sorted((r.event for r in landed if r.event_type is EventType.EPISODE_COMPLETED),
                       key=lambda e: e.episode_index)
    assert [(e.step_count, e.cumulative_reward, e.seed) for e in completed] == [
        (x.steps, x.reward, x.seed) for x in result.episodes]
    assert sum(r.event_type is EventType.STEP_COMPLETED for r in landed) == result.total_steps


class _Recorder:
    """Runtime hooks that keep the events in call order (the bridge publishes to any)."""

    def __init__(self) -> None:
        self.events: list[Any] = []

    def __getattr__(self, callback: str) -> Any:
        return self.events.append


class _Unrebuildable(gym.Wrapper):  # type: ignore[misc]
    """A user's wrapper without recorded constructor arguments: gym.make cannot remake it."""


def test_a_wrapped_env_publishes_its_inner_spec_gym_make_rebuilds_in_the_reset_infos() -> None:
    from gymnasium.envs.registration import EnvSpec

    from rlmesh_stream.schemas.contract.events import ENV_SPEC_INFO

    hooks = _Recorder()
    bridge = rlmesh_bridge(hooks, env_id="CartPole-v1", model_component_id="m")
    env = _Unrebuildable(gym.make("CartPole-v1", max_episode_steps=77))
    rlmesh.run(Model(lambda obs: np.int64(0)), bridge.wrap(env), seeds=[1, 2], hooks=bridge)

    resets = [e for e in hooks.events
              if isinstance(e, ev.ObservationEmittedEvent) and e.is_reset]
    assert len(resets) == 2 and all(e.step == 0 for e in resets)
    remade = gym.make(EnvSpec.from_json(resets[0].infos[ENV_SPEC_INFO]))
    assert remade.spec.max_episode_steps == 77
    assert remade.spec.id == "CartPole-v1"


def test_observation_steps_count_the_steps_taken_reset_0_terminal_t() -> None:
    hooks = _Recorder()
    bridge = rlmesh_bridge(hooks, env_id="CartPole-v1", model_component_id="m")
    result = rlmesh.run(Model(lambda obs: np.int64(0)), bridge.wrap(gym.make("CartPole-v1")),
                        seeds=[3], hooks=bridge)

    steps = [e.step for e in hooks.events if isinstance(e, ev.ObservationEmittedEvent)]
    actions = [e.step for e in hooks.events if isinstance(e, ev.ActionReceivedEvent)]
    (episode,) = result.episodes
    assert steps == list(range(episode.steps + 1))
    assert actions == list(range(episode.steps))

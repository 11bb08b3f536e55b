"""The exporter's memory is bounded by `max_held_steps` per running single-lane session.

An episode that never ends holds no more than the bound (its values are dropped once it
passes it, and it is skipped as `too_long` when its session ends); a session that never
ends releases its whole episodes once it holds more than the bound, instead of holding
every episode until its end.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pyarrow.dataset as pads
import pytest
from click.testing import CliRunner

from rlmesh_stream.consumers.datasets.episodes import Filters, Joiner
from rlmesh_stream.infra.cli import main
from rlmesh_stream.producer.leaves import LeafCodec
from rlmesh_stream.schemas.connection.config import StreamConfig
from rlmesh_stream.schemas.contract import events as ev
from tests.datasets.rollouts import run_cartpole

ROUTE = ev.RuntimeEnvContext(env_id="e", env_component_id="e", model_component_id="m")
OBS = LeafCodec(gym.spaces.Box(-1, 1, (2,), np.float32))
ACT = LeafCodec(gym.spaces.Discrete(2))


def _steps(record: str, steps: int, *, completed: bool = True) -> list[object]:
    """One single-lane episode's events in publishing order (terminal observation
    included), completed or still running."""
    ids = dict(session_id="s", route=ROUTE, episode_id=record, episode_record_id=record)
    lanes = dict(episode_ids=[record], episode_record_ids=[record], env_index=0)
    out: list[object] = [ev.EpisodeStartedEvent(**ids, episode_index=1, env_index=0,
                                                started_from_auto_reset=False, seed=3)]
    for t in range(steps + 1):
        leaves = OBS.encode(np.full(2, 0.5, np.float32))
        out.append(ev.ObservationEmittedEvent(
            **ids, **lanes, step=t, is_reset=t == 0, num_envs=1,
            observation_space=OBS.spec, observation=leaves, raw_observation=leaves))
        if t < steps:
            out.append(ev.ActionReceivedEvent(**ids, **lanes, step=t, action_space=ACT.spec,
                                              action=ACT.encode(1), raw_action=ACT.encode(1)))
            out.append(ev.StepCompletedEvent(
                **ids, step=t, env_index=0, rewards=[1.0], terminated=[t == steps - 1],
                truncated=[False], autoreset_roll=[False], predict_ms=0.1, step_ms=0.1))
    if completed:
        out.append(ev.EpisodeCompletedEvent(
            **ids, episode_index=1, env_index=0, step_count=steps,
            cumulative_reward=float(steps), terminated=True, truncated=False, duration_ms=1,
            seed=3))
    return out


def _ended(total_steps: int, total_episodes: int) -> ev.SessionEndedEvent:
    return ev.SessionEndedEvent(session_id="s", route=ROUTE, reason="completed",
                                total_steps=total_steps, total_episodes=total_episodes)


def _held(joiner: Joiner) -> int:
    return sum(len(ep.steps) + len(ep.actions) for ep in joiner.pending.values())


def test_an_episode_past_the_bound_holds_nothing_and_is_skipped_as_too_long_at_its_end() -> None:
    joiner = Joiner(Filters(), max_held_steps=10)
    for e in _steps("long", 25):
        joiner.add(e)
        assert _held(joiner) <= 2 * 11  # its steps and actions, the bound's plus one each

    assert joiner.release() == []
    (pending,) = joiner.pending.values()
    assert pending.steps == {} and pending.observations == {} and pending.actions == {}

    joiner.add(_ended(25, 1))
    assert joiner.release() == []
    assert joiner.skipped == {"too_long": 1}
    assert joiner.pending == {}


def test_an_episode_past_the_bound_without_its_completion_is_decided_at_the_end_of_a_run(
) -> None:
    """Its completion may still come (topics are read at different paces), and with it a
    NEXT_STEP roll the next episode begins from: decided, as any open episode, at the end
    of the history."""
    joiner = Joiner(Filters(), max_held_steps=10)
    for e in _steps("long", 25, completed=False):
        joiner.add(e)
    joiner.add(_ended(25, 1))

    assert joiner.release() == []
    assert list(joiner.pending) == [("s", "long")]
    assert joiner.release(final=True) == []
    assert joiner.skipped == {"too_long": 1}


def test_an_episode_read_without_its_steps_is_bounded_too() -> None:
    """The action and observation topics can run far ahead of the step topic."""
    joiner = Joiner(Filters(), max_held_steps=10)
    for e in _steps("long", 25, completed=False):
        if not isinstance(e, ev.StepCompletedEvent):
            joiner.add(e)

    (pending,) = joiner.pending.values()
    assert pending.problem == "too_long"
    assert pending.observations == {} and pending.actions == {}


def test_an_episode_past_the_bound_stays_open_at_the_end_of_a_run_while_its_session_runs(
) -> None:
    """Decided once, when its session ends: not skipped at one run's end and found again,
    partial, by the next run."""
    joiner = Joiner(Filters(), max_held_steps=10)
    for e in _steps("long", 25, completed=False):
        joiner.add(e)

    assert joiner.release(final=True) == []
    assert joiner.skipped == {}
    assert list(joiner.pending) == [("s", "long")]


def test_a_running_session_under_the_bound_holds_its_whole_episodes_until_its_end() -> None:
    joiner = Joiner(Filters(), max_held_steps=100)
    for record in ("a", "b", "c", "d"):
        for e in _steps(record, 5):
            joiner.add(e)

    assert joiner.release() == []  # the caution tag is known only at the session's end
    joiner.add(_ended(20, 4))
    assert sorted(e.record_id for e in joiner.release()) == ["a", "b", "c", "d"]


def test_a_running_session_past_the_bound_releases_whole_episodes_each_once() -> None:
    joiner = Joiner(Filters(), max_held_steps=10)
    released = []
    for record in ("a", "b", "c", "d", "e", "f"):
        for e in _steps(record, 5):
            joiner.add(e)
        released += joiner.release()
        assert sum(len(ep.steps) for ep in joiner.pending.values()) <= 10

    joiner.add(_ended(30, 6))
    released += joiner.release()

    assert sorted(e.record_id for e in released) == ["a", "b", "c", "d", "e", "f"]
    assert all(e.length == 5 and e.terminal_observation for e in released)
    assert joiner.skipped == {}


@pytest.mark.stack
def test_export_skips_the_episodes_longer_than_max_held_steps_and_says_so(
    make_hooks: Any, stream_config: StreamConfig, tmp_path: Path,
) -> None:
    lengths = [e.steps for e in run_cartpole(make_hooks, [51, 52, 53, 54]).episodes]
    bound = sorted(lengths)[1]  # at least the two longest passes it, the shortest not
    out = tmp_path / "pq"

    result = CliRunner().invoke(main, [
        "export", "trajectories", "--out", str(out), "--format", "parquet", "--quiet",
        "--from-beginning", "--until-end", "--max-held-steps", str(bound),
        "--bootstrap", stream_config.bootstrap, "--registry-url", stream_config.registry_url,
        "--topic-prefix", stream_config.topic_prefix])

    assert result.exit_code == 0, result.output
    too_long = sum(n > bound for n in lengths)
    exported = pads.dataset(out / "episodes", partitioning="hive").to_table().to_pylist()
    assert sorted(e["steps"] for e in exported) == sorted(n for n in lengths if n <= bound)
    assert f"skipped {too_long} episode{'s' if too_long > 1 else ''} (too_long)" in result.output

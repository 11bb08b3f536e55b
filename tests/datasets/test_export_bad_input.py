"""Bad input never crashes the export nor gives a wrong array: a skipped, counted episode."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from rlmesh_stream.consumers.datasets.episodes import Filters, Joiner
from rlmesh_stream.producer.leaves import LeafCodec
from rlmesh_stream.schemas.contract import events as ev

ROUTE = ev.RuntimeEnvContext(env_id="e", env_component_id="e", model_component_id="m")
OBS = LeafCodec(gym.spaces.Box(-1, 1, (2,), np.float32))
ACT = LeafCodec(gym.spaces.Discrete(2))


def _episode(steps: int, *, sid: str = "s1") -> list[object]:
    """The events of one single-lane episode of `steps` steps, terminal observation included."""
    ids = dict(session_id=sid, route=ROUTE, episode_id="e1", episode_record_id="ep-000001")
    out: list[object] = [ev.EpisodeStartedEvent(**ids, episode_index=1, env_index=0,
                                                started_from_auto_reset=False, seed=3)]
    lanes = dict(episode_ids=["e1"], episode_record_ids=["ep-000001"], env_index=0)
    for t in range(steps + 1):
        leaves = OBS.encode(np.full(2, t, np.float32))
        out.append(ev.ObservationEmittedEvent(
            **ids, **lanes, step=t, is_reset=t == 0, num_envs=1,
            observation_space=OBS.spec, observation=leaves, raw_observation=leaves))
    for t in range(steps):
        out.append(ev.ActionReceivedEvent(**ids, **lanes, step=t, action_space=ACT.spec,
                                          action=ACT.encode(1), raw_action=ACT.encode(1)))
        out.append(ev.StepCompletedEvent(
            **ids, step=t, env_index=0, rewards=[1.0], terminated=[t == steps - 1],
            truncated=[False], autoreset_roll=[False], predict_ms=0.1, step_ms=0.1))
    out.append(ev.EpisodeCompletedEvent(
        **ids, episode_index=1, env_index=0, step_count=steps, cumulative_reward=float(steps),
        terminated=True, truncated=False, duration_ms=1, seed=3))
    out.append(ev.SessionEndedEvent(session_id=sid, route=ROUTE, reason="completed",
                                    total_steps=steps, total_episodes=1))
    return out


def _join(events: list[object], *, final: bool = True) -> Joiner:
    joiner = Joiner(Filters())
    for e in reversed(events):  # any arrival order
        joiner.add(e)
    joiner.released = joiner.release(final=final)  # type: ignore[attr-defined]
    return joiner


def test_a_whole_episode_in_reverse_arrival_order_is_released_with_t_plus_1_observations():
    joiner = _join(_episode(4), final=False)

    (episode,) = joiner.released  # type: ignore[attr-defined]
    assert [o.tolist() for o in episode.observations] == [[t, t] for t in range(5)]
    assert episode.terminal_observation


def test_a_leaf_whose_bytes_do_not_match_its_space_skips_the_episode_counted():
    events = _episode(3)
    bad = next(e for e in events if isinstance(e, ev.ObservationEmittedEvent))
    bad.observation = [b"\x00" * 7]

    joiner = _join(events)

    assert joiner.released == []  # type: ignore[attr-defined]
    assert joiner.skipped["bad_leaves"] == 1
    assert "8 bytes" in joiner.skip_examples["bad_leaves_error"]


def test_an_episode_with_a_missing_step_is_skipped_as_incomplete():
    events = [e for e in _episode(5)
              if not (isinstance(e, ev.StepCompletedEvent) and e.step == 2)]

    joiner = _join(events)

    assert joiner.released == []  # type: ignore[attr-defined]
    assert joiner.skipped == {"incomplete": 1}


def test_a_space_that_changes_mid_episode_skips_the_episode():
    events = _episode(3)
    other = LeafCodec(gym.spaces.Box(-1, 1, (3,), np.float32))
    last = [e for e in events if isinstance(e, ev.ObservationEmittedEvent)][-1]
    last.observation_space = other.spec
    last.observation = other.encode(np.zeros(3, np.float32))

    joiner = _join(events)

    assert joiner.released == []  # type: ignore[attr-defined]
    assert joiner.skipped == {"space_changed": 1}


def test_a_session_end_read_before_its_episodes_completed_event_waits_for_it():
    # the end of the session is on another topic and can be read first: a checkpoint
    # in between must not skip the episode as incomplete
    events = _episode(3)
    completed = next(e for e in events if isinstance(e, ev.EpisodeCompletedEvent))
    joiner = Joiner(Filters())
    for e in events:
        if e is not completed:
            joiner.add(e)
    assert joiner.release(final=False) == [] and not joiner.skipped

    joiner.add(completed)

    (episode,) = joiner.release(final=False)
    assert episode.length == 3 and not joiner.skipped


def test_an_episode_of_a_session_still_running_waits_instead_of_being_skipped():
    events = [e for e in _episode(3) if not isinstance(e, ev.SessionEndedEvent)]

    joiner = _join(events, final=False)

    assert joiner.released == [] and not joiner.skipped  # type: ignore[attr-defined]
    assert list(joiner.pending) == [("s1", "ep-000001")]


class _Events:
    """Hooks that keep what the simulator emits, in order (no Kafka)."""

    def __init__(self) -> None:
        self.events: list[object] = []

    def __getattr__(self, name: str):
        return self.events.append


def _fleet() -> tuple[list[object], object]:
    from rlmesh_stream.producer.simulator import simulate_fleet

    sink = _Events()
    manifest = simulate_fleet(sink, sessions=1, lanes=3, episodes=6, seed=4, failure_rate=0.0,
                              next_step_fraction=1.0)
    return sink.events, manifest


def test_a_vector_session_is_split_into_its_lanes_episodes_as_the_manifest_says():
    events, manifest = _fleet()

    joiner = Joiner(Filters())
    for e in events:
        joiner.add(e)
    released = joiner.release()

    assert sorted((e.record_id, e.length, e.steps.total_reward()) for e in released) == (
        sorted((m.episode_record_id, m.steps, m.reward) for m in manifest.episodes))


def test_a_vector_session_waits_for_its_episode_started_events_read_last():
    # each event type is a topic of its own: a checkpoint can come after the session's
    # steps, completions and end were read but before its episode_started events; the
    # session is not whole yet (it used to be released then, every episode skipped as
    # incomplete, and the started events read next counted incomplete once more)
    events, manifest = _fleet()
    started = [e for e in events if isinstance(e, ev.EpisodeStartedEvent)]
    joiner = Joiner(Filters())
    for e in events:
        if not isinstance(e, ev.EpisodeStartedEvent):
            joiner.add(e)
    assert joiner.release(final=False) == [] and not joiner.skipped

    for e in started:
        joiner.add(e)
    released = joiner.release(final=False)

    assert len(released) == len(manifest.episodes) and not joiner.skipped


def test_a_vector_session_missing_one_observation_is_skipped_not_shifted():
    events, manifest = _fleet()
    observations = [i for i, e in enumerate(events)
                    if isinstance(e, ev.ObservationEmittedEvent) and not e.is_reset]
    del events[observations[len(observations) // 2]]

    joiner = Joiner(Filters())
    for e in events:
        joiner.add(e)

    assert joiner.release(final=True) == []
    assert joiner.skipped == {"misaligned": len(manifest.episodes)}


def test_a_vector_session_missing_its_last_observation_is_skipped_not_shifted():
    events, manifest = _fleet()
    last = max(i for i, e in enumerate(events) if isinstance(e, ev.ObservationEmittedEvent))
    del events[last]

    joiner = Joiner(Filters())
    for e in events:
        joiner.add(e)

    assert joiner.release(final=True) == []
    assert joiner.skipped == {"misaligned": len(manifest.episodes)}


def test_a_caution_advisory_read_after_its_sessions_episodes_were_written_is_counted():
    joiner = Joiner(Filters())
    for e in _episode(2):
        joiner.add(e)
    (released,) = joiner.release()

    joiner.add(ev.RelayAdvisoryEvent(
        session_id="s1", route=ROUTE, leg=ev.Leg.OBSERVATION,
        advisory=ev.Advisory(severity=ev.AdvisorySeverity.CAUTION, message="zeros")))

    assert not released.caution
    assert joiner.skipped["exported_before_their_caution_advisory"] == 1

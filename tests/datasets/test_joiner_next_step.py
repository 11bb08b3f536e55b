"""One-lane sessions under NEXT_STEP autoreset, joined in memory: the roll after each
episode (an action, a step flagged `autoreset_roll` and an observation, all attributed to
the ended episode) gives the next episode its reset observation, in whatever order the
topics are read, across a restart, and leaves nothing pending behind."""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from rlmesh_stream.consumers.datasets import state
from rlmesh_stream.consumers.datasets.certificate import Certificate
from rlmesh_stream.consumers.datasets.episodes import Joiner
from rlmesh_stream.consumers.datasets.model import Episode, Filters
from rlmesh_stream.producer.manifest import Manifest
from rlmesh_stream.producer.simulator import simulate_fleet
from rlmesh_stream.schemas.contract import events as ev
from rlmesh_stream.schemas.contract.topics import EventType

Read = tuple[EventType, int]  # a topic and an offset in its one partition


@dataclass
class History:
    """A simulated fleet's events, a topic (of one partition) per event type."""

    manifest: Manifest
    topics: dict[EventType, list[Any]] = field(default_factory=lambda: defaultdict(list))
    resets: dict[tuple[str, str], bytes] = field(default_factory=dict)  # as emitted
    order: dict[int, int] = field(default_factory=dict)  # id(event) -> its emission order

    def record(self, event: Any) -> None:
        self.order.setdefault(id(event), len(self.order))
        self.topics[EventType.of(event)].append(event)

    def interleaved(self, rng: random.Random, start: dict[EventType, int] | None = None,
                    ) -> list[Read]:
        """Every record from `start` on, each topic in order, the topics in a random mix
        (as a consumer reads partitions at different paces)."""
        at = {t: (start or {}).get(t, 0) for t in self.topics}
        out: list[Read] = []
        while live := [t for t in self.topics if at[t] < len(self.topics[t])]:
            t = rng.choice(live)
            out.append((t, at[t]))
            at[t] += 1
        return out


def _history(seed: int, *, next_step: bool = True, failure_rate: float = 0.0,
             repeat_observations: bool = False) -> History:
    history = History(Manifest(seed))
    history.manifest = simulate_fleet(_Driving(history, repeat_observations), sessions=4,
                                      lanes=1, episodes=4, seed=seed,
                                      failure_rate=failure_rate,
                                      next_step_fraction=1.0 if next_step else 0.0)
    return history


class _Driving:
    """The hooks the simulator drives: records each event, notes each episode's reset
    observation (its own, or the roll's before it), and with `repeat` publishes every
    non-reset observation twice (a producer that re-sends)."""

    def __init__(self, history: History, repeat: bool) -> None:
        self.history, self.repeat = history, repeat
        self.roll: dict[str, bool] = {}
        self.roll_observation: dict[str, bytes] = {}

    def __getattr__(self, name: str) -> Any:
        return self._event

    def _event(self, e: Any) -> None:
        h = self.history
        if isinstance(e, ev.StepCompletedEvent):
            self.roll[e.session_id] = e.autoreset_roll[0]
        elif isinstance(e, ev.ObservationEmittedEvent):
            if e.is_reset:
                h.resets[(e.session_id, e.episode_record_id)] = e.observation[0]
            elif self.roll.pop(e.session_id, False):
                self.roll_observation[e.session_id] = e.observation[0]
        elif isinstance(e, ev.EpisodeStartedEvent) and e.session_id in self.roll_observation:
            h.resets[(e.session_id, e.episode_record_id)] = self.roll_observation.pop(
                e.session_id)
        h.record(e)
        if self.repeat and isinstance(e, ev.ObservationEmittedEvent) and not e.is_reset:
            h.record(e)


def _read(joiner: Joiner, history: History, reads: list[Read]) -> list[Episode]:
    """Feed `reads` to `joiner`, releasing every few records (a live run's checkpoints)."""
    out: list[Episode] = []
    for n, (topic, offset) in enumerate(reads):
        joiner.add(history.topics[topic][offset], (topic.value, 0, offset))
        if n % 5 == 0:
            out += joiner.release()
    return out + joiner.release()


def _exportable(history: History) -> set[tuple[str, str]]:
    return {(e.session_id, e.episode_record_id) for e in history.manifest.episodes
            if e.status != "aborted" and e.steps > 0}


def _wrong_resets(history: History, out: list[Episode]) -> list[tuple[str, str]]:
    """The episodes released with another first observation than the one emitted."""
    return [(e.session_id, e.record_id) for e in out
            if np.asarray(e.observations[0]).tobytes() != history.resets[(e.session_id,
                                                                           e.record_id)]]


def _observations_last(history: History) -> list[Read]:
    """Every other topic read to its end first (a lagging observation partition)."""
    return [*((t, i) for t in history.topics if t is not OBS
              for i in range(len(history.topics[t]))),
            *((OBS, i) for i in range(len(history.topics[OBS])))]


OBS = EventType.OBSERVATION_EMITTED


@pytest.mark.parametrize("seed", range(6))
def test_every_episode_is_released_whatever_order_the_topics_are_read_in(seed):
    history = _history(seed)
    joiner = Joiner(Filters())

    out = _read(joiner, history, history.interleaved(random.Random(seed)))
    out += joiner.release(final=True)

    assert Counter((e.session_id, e.record_id) for e in out) == Counter(_exportable(history))
    assert joiner.skipped == Counter()


def test_each_episode_begins_from_its_reset_observation_as_emitted():
    history = _history(7)
    joiner = Joiner(Filters())

    out = _read(joiner, history, history.interleaved(random.Random(7)))

    assert len(out) == len(_exportable(history)) == 16
    for e in out:
        emitted = np.frombuffer(history.resets[(e.session_id, e.record_id)], "<f4")
        assert np.asarray(e.observations[0]).tobytes() == emitted.tobytes()
        assert e.terminal_observation


def test_ended_sessions_leave_no_episode_pending_and_no_resume_point():
    history = _history(8)
    joiner = Joiner(Filters())
    reads = history.interleaved(random.Random(8))

    _read(joiner, history, reads)

    read = {(t.value, 0): len(history.topics[t]) for t in history.topics}
    assert joiner.pending == {}
    assert joiner.resume_offsets(read) == read


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("cut", [0.25, 0.5, 0.75])
def test_a_restart_releases_every_episode_once(seed, cut):
    """Committed mid-history, restored, read again from the resume offsets: an episode
    pending at the commit has its reset observation in the roll of one released before."""
    history = _history(seed, failure_rate=0.2)
    rng = random.Random(seed)
    reads = history.interleaved(rng)
    reads = reads[:int(len(reads) * cut)]
    joiner = Joiner(Filters(include_abandoned=True))
    out = _read(joiner, history, reads)
    read = {(t.value, 0): 0 for t in history.topics}
    for topic, offset in reads:
        read[(topic.value, 0)] = offset + 1
    committed = state.load(state.dump(joiner.state(), Certificate()), "test")
    committed.pop("certificate")
    resume = joiner.resume_offsets(read)

    again = Joiner(Filters(include_abandoned=True))
    again.restore(committed, dict(read))
    start = {t: resume[(t.value, 0)] for t in history.topics}
    out += _read(again, history, history.interleaved(rng, start))
    out += again.release(final=True)

    released = Counter((e.session_id, e.record_id) for e in out)
    assert released == Counter({(e.session_id, e.episode_record_id): 1
                                for e in history.manifest.episodes if e.steps > 0})
    assert len(out) + sum(again.skipped.values()) == len(history.manifest.episodes)
    for e in out:
        if not e.abandoned:
            emitted = history.resets[(e.session_id, e.record_id)]
            assert np.asarray(e.observations[0]).tobytes() == emitted


def test_a_repeated_observation_is_not_the_reset_observation_of_a_driver_reset_episode():
    history = _history(9, next_step=False, repeat_observations=True)
    joiner = Joiner(Filters())

    out = _read(joiner, history, history.interleaved(random.Random(9)))
    out += joiner.release(final=True)

    assert {(e.session_id, e.record_id) for e in out} == _exportable(history)
    for e in out:
        emitted = history.resets[(e.session_id, e.record_id)]
        assert np.asarray(e.observations[0]).tobytes() == emitted
    assert joiner.skipped == Counter()


def test_an_observation_sent_again_is_not_taken_for_the_roll():
    history = _history(9, repeat_observations=True)
    joiner = Joiner(Filters())

    out = _read(joiner, history, history.interleaved(random.Random(9)))
    out += joiner.release(final=True)

    assert {(e.session_id, e.record_id) for e in out} == _exportable(history)
    assert _wrong_resets(history, out) == []


def test_an_episode_of_exactly_max_held_steps_is_held_with_its_rolls_action():
    history = _history(2)
    steps = [e.steps for e in history.manifest.episodes]
    joiner = Joiner(Filters(), max_held_steps=20)

    out = _read(joiner, history, history.interleaved(random.Random(2)))
    out += joiner.release(final=True)

    assert 20 in steps
    assert sorted(len(e.steps) for e in out) == sorted(t for t in steps if t <= 20)
    assert joiner.skipped == Counter({"too_long": sum(t > 20 for t in steps)})


def test_the_roll_after_an_episode_too_long_to_hold_begins_the_next_episode():
    history = _history(3)
    joiner = Joiner(Filters(), max_held_steps=20)

    out = _read(joiner, history, _observations_last(history))
    out += joiner.release(final=True)

    too_long = {(e.session_id, e.episode_record_id) for e in history.manifest.episodes
                if e.steps > 20}
    assert too_long
    assert {(e.session_id, e.record_id) for e in out} == _exportable(history) - too_long
    assert _wrong_resets(history, out) == []


def test_episodes_decided_before_their_observations_are_read_are_counted_once():
    history = _history(1)
    joiner = Joiner(Filters(), max_held_steps=10)

    out = _read(joiner, history, _observations_last(history))
    still_pending = dict(joiner.pending)
    out += joiner.release(final=True)

    assert still_pending == {}
    assert len(out) + sum(joiner.skipped.values()) == len(history.manifest.episodes)
    assert _wrong_resets(history, out) == []


def test_a_log_that_begins_inside_an_episode_gives_the_next_one_its_own_roll():
    """Retention removed every record older than one inside ep-000002: that episode's
    remaining observations are read before anything else of it (its completion comes
    last), and none of them is taken for its roll."""
    history = _history(5)
    sid = history.topics[OBS][0].session_id
    emitted = [e for t in history.topics for e in history.topics[t]]
    order = sorted(emitted, key=lambda e: history.order[id(e)])
    cut = next(history.order[id(e)] for e in order
               if isinstance(e, ev.ObservationEmittedEvent) and e.session_id == sid
               and e.episode_record_id == "ep-000002" and e.step == 3)
    start = {t: next((i for i, e in enumerate(events) if history.order[id(e)] >= cut),
                     len(events)) for t, events in history.topics.items()}
    joiner = Joiner(Filters())

    out = _read(joiner, history, history.interleaved(random.Random(1), start))
    out += joiner.release(final=True)

    assert (sid, "ep-000003") in {(e.session_id, e.record_id) for e in out}
    assert _wrong_resets(history, out) == []


def test_a_state_written_before_decided_episodes_were_kept_loads_with_none():
    row = [True, False, False, [10, 2], 2]  # ended, failed, caution, totals, exported

    loaded = state.load(state.dump({"sessions": {"s": row}, "first": [], "skipped": {},
                                    "skip_examples": {}}, Certificate()), "test")

    assert loaded["sessions"]["s"].decided == {}
    assert loaded["sessions"]["s"].exported == 2

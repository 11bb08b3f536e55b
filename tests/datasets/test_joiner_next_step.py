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

    def record(self, event: Any) -> None:
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

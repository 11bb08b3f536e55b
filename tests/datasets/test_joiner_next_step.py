"""One-lane sessions under NEXT_STEP autoreset, joined in memory: the roll after each
episode (an action, a step flagged `autoreset_roll` and an observation, all attributed to
the ended episode) gives the next episode its reset observation, in whatever order the
topics are read, across a restart, and leaves nothing pending behind."""

from __future__ import annotations

import dataclasses
import random
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from rlmesh_stream.consumers.datasets import state
from rlmesh_stream.consumers.datasets.certificate import Certificate
from rlmesh_stream.consumers.datasets.episodes import Joiner, plan_of
from rlmesh_stream.consumers.datasets.model import Episode, Filters
from rlmesh_stream.consumers.datasets.packed import PACKERS
from rlmesh_stream.producer.manifest import Manifest
from rlmesh_stream.producer.simulator import simulate_fleet
from rlmesh_stream.schemas.contract import events as ev
from rlmesh_stream.schemas.contract.topics import EventType
from tests.datasets.histories import Read, interleaved


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
        """Every record from `start` on, the topics read at different paces."""
        return interleaved(self.topics, rng, start)


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


def test_a_roll_whose_observation_equals_the_terminal_one_begins_the_next_episode():
    """An env whose observation never changes (a bandit): the roll's observation has the
    terminal one's bytes (a producer's copies are dropped before the joiner)."""
    history = _history(4)
    same = [np.zeros(4, np.float32).tobytes()]
    history.topics[OBS] = [dataclasses.replace(e, observation=same, raw_observation=same)
                           for e in history.topics[OBS]]
    joiner = Joiner(Filters())

    out = _read(joiner, history, history.interleaved(random.Random(4)))
    still_pending = dict(joiner.pending)
    out += joiner.release(final=True)

    assert {(e.session_id, e.record_id) for e in out} == _exportable(history)
    assert still_pending == {}


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


def _long_history(seed: int, episodes: int) -> History:
    history = History(Manifest(seed))
    history.manifest = simulate_fleet(_Driving(history, False), sessions=1, lanes=1,
                                      episodes=episodes, seed=seed, failure_rate=0.0,
                                      next_step_fraction=1.0)
    return history


def test_an_episode_too_long_to_hold_is_decided_once_its_terminal_observation_is_read():
    """Its steps, actions and session's end read first, its completion and observations
    last: skipped only once the observation its roll follows was read."""
    history = _history(3)
    done = EventType.EPISODE_COMPLETED
    reads = [(t, i) for t in history.topics if t not in (OBS, done)
             for i in range(len(history.topics[t]))]
    reads += [(t, i) for t in (OBS, done) for i in range(len(history.topics[t]))]
    joiner = Joiner(Filters(), max_held_steps=20)

    out = _read(joiner, history, reads)
    still_pending = dict(joiner.pending)

    too_long = {(e.session_id, e.episode_record_id) for e in history.manifest.episodes
                if e.steps > 20}
    assert {(e.session_id, e.record_id) for e in out} == _exportable(history) - too_long
    assert still_pending == {}
    assert _wrong_resets(history, out) == []


def test_many_episodes_decided_before_their_observations_are_each_counted_once():
    """One session of 100 episodes, most too long to hold, its observations read last."""
    history = _long_history(11, 100)
    joiner = Joiner(Filters(), max_held_steps=5)

    out = _read(joiner, history, _observations_last(history))
    still_pending = dict(joiner.pending)
    out += joiner.release(final=True)

    assert still_pending == {}
    assert len(out) + sum(joiner.skipped.values()) == 100
    assert len(out) == sum(e.steps <= 5 for e in history.manifest.episodes)


def test_a_restart_before_an_episodes_terminal_observation_is_read_again_keeps_its_roll():
    """Run 1 reads ep-000001 (too long to hold) to its terminal observation; run 2 reads
    every topic but the observations (ep-000001 is not decided: its terminal one was not
    read again, so it stays a resume point); run 3 reads every topic: ep-000002 begins
    from ep-000001's roll."""
    history = _long_history(12, 3)
    steps = {e.episode_record_id: e.steps for e in history.manifest.episodes}
    assert steps["ep-000001"] > 8 >= steps["ep-000002"] > 0
    obs = history.topics[OBS]
    terminal = next(i for i, e in enumerate(obs) if e.episode_record_id == "ep-000001"
                    and e.step == steps["ep-000001"])
    read = {(t.value, 0): 0 for t in history.topics}

    def feed(joiner: Joiner, reads: list[Read]) -> list[Episode]:
        out = []
        for topic, offset in reads:
            joiner.add(history.topics[topic][offset], (topic.value, 0, offset))
            read[(topic.value, 0)] = max(read[(topic.value, 0)], offset + 1)
            out += joiner.release()
        return out

    def restart(joiner: Joiner) -> tuple[Joiner, dict[EventType, int]]:
        resume = joiner.resume_offsets(read)
        committed = state.load(state.dump(joiner.state(), Certificate()), "test")
        committed.pop("certificate")
        again = Joiner(Filters(), max_held_steps=8)
        again.restore(committed, dict(read))
        return again, {t: resume[(t.value, 0)] for t in history.topics}

    joiner = Joiner(Filters(), max_held_steps=8)
    first = [t for t in history.topics if t not in (OBS, EventType.SESSION_ENDED)]
    out = feed(joiner, [(t, i) for t in first for i in range(len(history.topics[t]))
                        if getattr(history.topics[t][i], "episode_record_id",
                                   "ep-000001") == "ep-000001"]
               + [(OBS, i) for i in range(terminal + 1)])
    joiner, start = restart(joiner)
    out += feed(joiner, [(t, i) for t in history.topics if t is not OBS
                         for i in range(start[t], len(history.topics[t]))])
    joiner, start = restart(joiner)
    out += feed(joiner, [(t, i) for t in history.topics
                         for i in range(start[t], len(history.topics[t]))])
    out += joiner.release(final=True)

    assert "ep-000002" in {e.record_id for e in out}
    assert _wrong_resets(history, out) == []
    assert joiner.skipped == Counter({"too_long": sum(t > 8 for t in steps.values())})
    assert len(out) == sum(0 < t <= 8 for t in steps.values())


def _packed_reads(history: History, change: Any) -> list[tuple[EventType, int, tuple[Any, ...]]]:
    """Every record in topic order, its packed values (`ITEMS`) as `change` returns them
    (None: not published)."""
    out = []
    for topic, events in history.topics.items():
        for offset, event in enumerate(events):
            if topic in PACKERS:
                values = change(topic, event, list(PACKERS[topic](event, None)))
                if values is not None:
                    out.append((topic, offset, tuple(values)))
    return out


def _live(joiner: Joiner, reads: list[tuple[EventType, int, tuple[Any, ...]]],
          history: History) -> tuple[list[Episode], dict[tuple[str, int], int]]:
    """Feed packed records, release as a live run does; the resume offsets left behind."""
    out: list[Episode] = []
    for topic, offset, values in reads:
        joiner.add_planned(plan_of(topic), values, (topic.value, 0, offset))
    out += joiner.release()
    read = {(t.value, 0): len(events) for t, events in history.topics.items()}
    return out, {tp: o for tp, o in joiner.resume_offsets(read).items() if o != read[tp]}


def test_an_episode_of_no_step_without_its_observations_leaves_is_decided_live():
    """It ended before its first step (step count 0) and its reset observation came
    without leaves (over the producer's size cap)."""
    history = _history(2, next_step=False)
    first = history.manifest.episodes[0]
    assert first.steps > 0

    def no_step(topic: EventType, event: Any, values: list[Any]) -> list[Any] | None:
        if (getattr(event, "session_id", None), getattr(event, "episode_record_id", None)) != (
                first.session_id, first.episode_record_id):
            return values
        if topic in (EventType.ACTION_RECEIVED, EventType.STEP_COMPLETED) or (
                topic is OBS and not event.is_reset):
            return None
        if topic is OBS:
            values[6] = None  # the leaves omitted
        if topic is EventType.EPISODE_COMPLETED:
            values[3] = 0  # step_count
        return values

    joiner = Joiner(Filters())
    _, pinned = _live(joiner, _packed_reads(history, no_step), history)

    assert joiner.pending == {}
    assert pinned == {}
    assert joiner.skipped == Counter({"observation_leaves_omitted": 1})


def test_a_roll_observation_without_its_leaves_is_a_problem_of_the_next_episode():
    history = _history(3)
    seen: set[tuple[str, str, int]] = set()
    omitted: list[tuple[str, str]] = []

    def roll_omitted(topic: EventType, event: Any, values: list[Any]) -> list[Any]:
        if topic is OBS and not event.is_reset:
            key = (event.session_id, event.episode_record_id, event.step)
            if key in seen and not omitted:
                values[6] = None
                omitted.append(key[:2])
            seen.add(key)
        return values

    joiner = Joiner(Filters())
    out, pinned = _live(joiner, _packed_reads(history, roll_omitted), history)

    assert omitted
    assert joiner.pending == {}
    assert pinned == {}
    assert joiner.skipped == Counter({"observation_leaves_omitted": 1})
    assert len(out) == len(_exportable(history)) - 1


@pytest.mark.parametrize("lagging", [EventType.ACTION_RECEIVED, EventType.STEP_COMPLETED,
                                     EventType.EPISODE_STARTED])
def test_episodes_too_long_are_decided_once_each_whichever_topic_lags(lagging):
    """80 episodes, all too long to hold, one topic read after all the others: an episode
    is decided once read to its end, so no more than a lane's last is remembered."""
    history = History(Manifest(1))
    history.manifest = simulate_fleet(_Driving(history, False), sessions=1, lanes=1,
                                      episodes=80, seed=1, failure_rate=0.0,
                                      next_step_fraction=1.0)
    reads = [(t, i) for t in [*(t for t in history.topics if t is not lagging), lagging]
             for i in range(len(history.topics[t]))]
    joiner = Joiner(Filters(), max_held_steps=3)

    out = _read(joiner, history, reads)
    still_pending = dict(joiner.pending)
    out += joiner.release(final=True)

    assert still_pending == {}
    assert len(out) + sum(joiner.skipped.values()) == 80
    assert all(len(s.decided) <= 1 for s in joiner.sessions.values())

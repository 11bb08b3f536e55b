"""Vector-env sessions under `max_held_steps`, joined in memory: a running session holding
more lane steps than the bound releases the episodes whole in its groups read so far and
drops the groups no open episode needs, so it holds its open episodes, not its length;
every episode is still released (or skipped) once, with the values of a run without the
bound, whatever order the topics are read in and across a restart."""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from rlmesh_stream.consumers.datasets import state
from rlmesh_stream.consumers.datasets.certificate import LATE_CAUTION, Certificate
from rlmesh_stream.consumers.datasets.episodes import Joiner
from rlmesh_stream.consumers.datasets.model import Episode, Filters
from rlmesh_stream.producer.manifest import Manifest
from rlmesh_stream.producer.simulator import simulate_fleet
from rlmesh_stream.schemas.contract.topics import EventType
from tests.datasets.histories import Read, interleaved

BOUND = 40  # lane steps: a few group steps of 3 or 4 lanes



@dataclass
class History:
    """A simulated fleet's events, a topic (of one partition) per event type."""

    manifest: Manifest
    topics: dict[EventType, list[Any]] = field(default_factory=lambda: defaultdict(list))
    published: list[Read] = field(default_factory=list)  # every record, as published

    def __getattr__(self, name: str) -> Any:  # the simulator's hooks: every event recorded
        return self._event

    def _event(self, event: Any) -> None:
        topic = self.topics[EventType.of(event)]
        self.published.append((EventType.of(event), len(topic)))
        topic.append(event)

    def interleaved(self, rng: random.Random, start: dict[EventType, int] | None = None,
                    ) -> list[Read]:
        """Every record from `start` on, the topics read at different paces."""
        return interleaved(self.topics, rng, start)


def _history(seed: int, *, next_step: float, lanes: int = 3, sessions: int = 3,
             episodes: int = 30, failure_rate: float = 0.0, steps: int = 40) -> History:
    """`steps`: the episodes' most steps (2: every episode 2 steps, the lanes in step)."""
    history = History(Manifest(seed))
    history.manifest = simulate_fleet(history, sessions=sessions, lanes=lanes,
                                      episodes=episodes, seed=seed, failure_rate=failure_rate,
                                      next_step_fraction=next_step, max_episode_steps=steps)
    return history


def _read(joiner: Joiner, history: History, reads: list[Read],
          watch: list[int] | None = None) -> list[Episode]:
    """Feed `reads` to `joiner`, releasing every few records (a live run's checkpoints);
    `watch` gets the most group steps any session holds after each release."""
    out: list[Episode] = []
    for n, (topic, offset) in enumerate(reads):
        joiner.add(history.topics[topic][offset], (topic.value, 0, offset))
        if n % 5 == 0:
            out += joiner.release()
            if watch is not None:
                watch.append(max((len(s.groups.steps) for s in joiner.sessions.values()
                                  if s.groups is not None), default=0))
    return out + joiner.release()


def _values(e: Episode) -> tuple[Any, ...]:
    return (np.asarray(e.observations).tobytes(), np.asarray(e.actions).tobytes(),
            e.steps.rewards.tobytes(), e.steps.terminated.tobytes(),
            e.steps.truncated.tobytes(), e.abandoned, e.terminal_observation)


def _unbounded(history: History, filters: Filters) -> tuple[dict[Any, Any], Counter[str]]:
    """Every episode released by a joiner that never passes its bound, and its skips."""
    joiner = Joiner(filters, max_held_steps=10**9)
    out = _read(joiner, history, history.interleaved(random.Random(0)))
    out += joiner.release(final=True)
    return {(e.session_id, e.record_id): _values(e) for e in out}, joiner.skipped


def _skips(joiner: Joiner) -> Counter[str]:
    """The joiner's skips, but for the episodes exported before their session's caution
    advisory was read: a bounded joiner releases some before the advisory (counted, as
    for a single-lane session past the bound), where one without the bound waits."""
    return Counter({k: v for k, v in joiner.skipped.items() if k != LATE_CAUTION})


def _once(out: list[Episode]) -> dict[Any, Any]:
    released = Counter((e.session_id, e.record_id) for e in out)
    assert max(released.values(), default=1) == 1
    return {(e.session_id, e.record_id): _values(e) for e in out}


@pytest.mark.parametrize("published", [False, True], ids=["topics_mixed", "as_published"])
@pytest.mark.parametrize("next_step", [1.0, 0.0], ids=["next_step", "driver_resets"])
@pytest.mark.parametrize("seed", range(4))
def test_every_episode_is_released_once_with_the_values_of_a_run_without_the_bound(
        seed, next_step, published):
    history = _history(seed, next_step=next_step, lanes=3 + seed % 2)
    expected, skipped = _unbounded(history, Filters())
    joiner = Joiner(Filters(), max_held_steps=BOUND)

    reads = history.published if published else history.interleaved(random.Random(seed))
    out = _read(joiner, history, reads)
    out += joiner.release(final=True)

    assert _once(out) == expected
    assert _skips(joiner) == skipped
    assert any(s.early_done for s in joiner.sessions.values())  # the bound was passed


@pytest.mark.parametrize("next_step", [1.0, 0.0], ids=["next_step", "driver_resets"])
@pytest.mark.parametrize("episodes", [120, 480])
def test_a_running_session_holds_group_steps_of_its_open_episodes_not_of_its_length(
        next_step, episodes):
    """Read as published (a consumer keeping up), a session of 4 lanes whose episodes
    last at most 40 steps holds fewer groups than two of them, however long it runs (the
    episodes released early, the last ones when it ends)."""
    history = _history(5, next_step=next_step, lanes=4, sessions=1, episodes=episodes)
    joiner = Joiner(Filters(), max_held_steps=BOUND)
    held: list[int] = []

    out = _read(joiner, history, history.published, held)

    assert history.manifest.sessions[0].group_steps > episodes * 5
    assert max(held) < 2 * 40
    assert len(out) == episodes


def _restarted(history: History, filters: Filters, cuts: list[float], seed: int,
               published: bool) -> tuple[list[Episode], Joiner]:
    """Read with the bound, committed and restored at each of `cuts` (fractions of what
    is left to read), read again from the resume offsets each time, then to the end."""
    rng = random.Random(seed)
    reads = history.published if published else history.interleaved(rng)
    joiner = Joiner(filters, max_held_steps=BOUND)
    read = {(t.value, 0): 0 for t in history.topics}
    out: list[Episode] = []
    for cut in cuts:
        part = reads[:int(len(reads) * cut)]
        out += _read(joiner, history, part)
        for topic, offset in part:
            read[(topic.value, 0)] = max(read[(topic.value, 0)], offset + 1)
        committed = state.load(state.dump(joiner.state(), Certificate()), "test")
        committed.pop("certificate")
        resume = joiner.resume_offsets(read)
        joiner = Joiner(filters, max_held_steps=BOUND)
        joiner.restore(committed, dict(read))
        start = {t: resume[(t.value, 0)] for t in history.topics}
        reads = [(t, o) for t, o in history.published if o >= start[t]] if published else (
            history.interleaved(rng, start))
    out += _read(joiner, history, reads)
    return out + joiner.release(final=True), joiner


@pytest.mark.parametrize("published", [False, True], ids=["topics_mixed", "as_published"])
@pytest.mark.parametrize("next_step", [1.0, 0.0], ids=["next_step", "driver_resets"])
@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("cut", [0.2, 0.45, 0.7, 0.9])
def test_a_restart_releases_every_episode_once_with_equal_values(seed, cut, next_step,
                                                                 published):
    """Committed mid-history (groups dropped and episodes released before), restored, read
    again from the resume offsets: the dropped groups are not read again, the kept ones are
    numbered from the first kept, and the rolls after episodes released early still give
    the next ones their reset observations."""
    history = _history(seed, next_step=next_step, lanes=3 + seed % 2, failure_rate=0.2)
    filters = Filters(include_abandoned=True)
    expected, skipped = _unbounded(history, filters)

    out, joiner = _restarted(history, filters, [cut], seed, published)

    assert _once(out) == expected
    assert _skips(joiner) == skipped


@pytest.mark.parametrize("published", [False, True], ids=["topics_mixed", "as_published"])
@pytest.mark.parametrize("next_step", [1.0, 0.0], ids=["next_step", "driver_resets"])
@pytest.mark.parametrize("seed", range(3))
def test_restarts_one_after_another_release_every_episode_once(seed, next_step, published):
    """A partition where a session has no record kept since a restart keeps the resume
    point it had (its records below it dropped before), through the next restart."""
    history = _history(seed, next_step=next_step, lanes=2 + seed, failure_rate=0.2)
    filters = Filters(include_abandoned=True)
    expected, skipped = _unbounded(history, filters)

    out, joiner = _restarted(history, filters, [0.3, 0.2, 0.4, 0.5], seed, published)

    assert _once(out) == expected
    assert _skips(joiner) == skipped


@pytest.mark.parametrize("published", [False, True], ids=["topics_mixed", "as_published"])
@pytest.mark.parametrize("next_step", [1.0, 0.0], ids=["next_step", "driver_resets"])
@pytest.mark.parametrize("cut", [0.15, 0.3, 0.5, 0.65, 0.8])
def test_a_restart_after_every_group_read_was_dropped_reads_none_of_them_again(
        cut, next_step, published):
    """Lanes in step (every episode 2 steps long) end their episodes together: every group
    read can be dropped, leaving a partition with no record of the session kept; a restart
    reads it again only past the last one dropped, through later restarts too."""
    history = _history(11, next_step=next_step, lanes=3, episodes=150, steps=2)
    filters = Filters(include_abandoned=True)
    expected, skipped = _unbounded(history, filters)

    out, joiner = _restarted(history, filters, [cut, cut, cut], 11, published)

    assert _once(out) == expected
    assert _skips(joiner) == skipped


def test_a_roll_read_after_its_session_was_released_makes_no_episode_pending_again():
    """A NEXT_STEP session's last group (every lane rolling after its last episode) adds
    no step to its totals, so the session can be released whole before it is read."""
    history = _history(2, next_step=1.0, sessions=1, episodes=6, steps=2)
    last = {t: len(history.topics[t]) - 1 for t in
            (EventType.ACTION_RECEIVED, EventType.STEP_COMPLETED,
             EventType.OBSERVATION_EMITTED)}
    assert all(history.topics[EventType.STEP_COMPLETED][-1].autoreset_roll)
    joiner = Joiner(Filters())
    reads = [(t, o) for t, o in history.published if last.get(t) != o]

    out = _read(joiner, history, reads)
    out += _read(joiner, history, list(last.items()))
    out += joiner.release(final=True)

    assert len(_once(out)) == 6
    assert joiner.pending == {}
    assert joiner.skipped == Counter()


def test_a_failed_sessions_open_episodes_are_still_skipped_as_abandoned():
    history = _history(3, next_step=0.5, lanes=4, episodes=40, failure_rate=1.0)
    expected, skipped = _unbounded(history, Filters())
    joiner = Joiner(Filters(), max_held_steps=BOUND)

    out = _read(joiner, history, history.interleaved(random.Random(3)))
    out += joiner.release(final=True)

    assert _once(out) == expected
    assert _skips(joiner) == skipped
    assert skipped["abandoned"] > 0


def _losing(history: History, event_type: EventType, which: int) -> History:
    """`history` without the `which`-th record of `event_type` (lost, or dead-lettered)."""
    lost = history.topics[event_type][which]
    out = History(history.manifest)
    for topic, offset in history.published:
        event = history.topics[topic][offset]
        if event is not lost:
            out._event(event)
    return out


@pytest.mark.parametrize("lost", [EventType.ACTION_RECEIVED, EventType.STEP_COMPLETED,
                                  EventType.OBSERVATION_EMITTED])
@pytest.mark.parametrize("next_step", [1.0, 0.0], ids=["next_step", "driver_resets"])
def test_a_running_session_that_lost_a_group_record_holds_no_more_than_its_bound(
        lost, next_step):
    """A record lost in its third group step leaves a long session's groups misaligned for
    good: it keeps the episodes released before, skips every later one as `misaligned`
    once its end is read (as a run without the bound skips them all), and holds no more
    groups than an aligned session while it runs."""
    whole = _history(5, next_step=next_step, lanes=4, sessions=1, episodes=240)
    history = _losing(whole, lost, len(whole.topics[lost]) // 3)
    joiner = Joiner(Filters(), max_held_steps=BOUND)
    held: list[int] = []

    out = _read(joiner, history, history.published, held)
    out += joiner.release(final=True)

    released = _once(out)
    expected, _ = _unbounded(whole, Filters())
    assert released == {k: expected[k] for k in released}  # as read without the loss
    assert 0 < len(released) < 240 // 2
    assert joiner.skipped == Counter({"misaligned": 240 - len(released)})
    assert max(held) < 2 * 40


def _looked_at_after_every_record(history: History, reads: list[Read],
                                  ) -> tuple[list[Episode], Joiner]:
    """Read with the bound's early release (vector.py `release_prefix`) tried after every
    record: every moment a run could try it at (when it does depends on its pace; here
    the next try is not put off, `next_try`)."""
    joiner = Joiner(Filters(), max_held_steps=1)
    out: list[Episode] = []
    for topic, offset in reads:
        joiner.add(history.topics[topic][offset], (topic.value, 0, offset))
        for session in joiner.sessions.values():
            if session.groups is not None:
                session.groups.next_try = 0
        out += joiner.release()
    return out + joiner.release(final=True), joiner


@pytest.mark.parametrize("seed", range(4))
def test_a_lost_terminal_observation_shifts_no_observation_into_an_episode(seed):
    """A lane's terminal observation lost: the roll's observation after it names the same
    episodes (the ended one's id kept), so the names take it for the terminal one; the
    group after shows the loss (its action names the ended episode, its observation the
    next), and an episode goes early only once that group is read too."""
    whole = _history(seed, next_step=1.0, lanes=4, sessions=1, episodes=40)
    observations = whole.topics[EventType.OBSERVATION_EMITTED]
    names = [tuple(o.episode_record_ids) for o in observations]
    lost = next(i for i in range(2, len(observations) - 2)
                if not any(o.is_reset for o in observations[i - 1:i + 3])
                and names[i - 1] == names[i] == names[i + 1] != names[i + 2])
    history = _losing(whole, EventType.OBSERVATION_EMITTED, lost)
    # the observations read last: the prefix grows one observation at a time
    reads = sorted(history.published, key=lambda r: r[0] is EventType.OBSERVATION_EMITTED)

    out, joiner = _looked_at_after_every_record(history, reads)

    released = _once(out)
    expected, _ = _unbounded(whole, Filters())
    assert released == {k: expected[k] for k in released}
    assert joiner.skipped["misaligned"] > 0


@pytest.mark.parametrize("seed", range(4))
def test_a_step_lost_while_the_primary_lane_is_idle_shifts_no_step_into_an_episode(seed):
    """Lane 0 with no episode left names none: the groups' primary (record, step) is
    ("", 0) in every action and step, so a step lost there shifts the later ones with
    nothing in the names to show it. An episode goes early only if its lane's steps end
    it at its last group and nowhere before."""
    whole = _history(seed, next_step=0.0, lanes=3, sessions=1, episodes=12, steps=40)
    actions = whole.topics[EventType.ACTION_RECEIVED]
    lost = next(k for k in range(1, len(actions) - 3)
                if actions[k - 1].episode_record_ids[0] == ""
                and any(actions[k].episode_record_ids))
    history = _losing(whole, EventType.STEP_COMPLETED, lost)
    # the steps read last: the prefix grows one step at a time
    reads = sorted(history.published, key=lambda r: r[0] is EventType.STEP_COMPLETED)

    out, joiner = _looked_at_after_every_record(history, reads)

    released = _once(out)
    expected, _ = _unbounded(whole, Filters())
    assert released == {k: expected[k] for k in released}
    assert joiner.skipped["misaligned"] > 0


@pytest.mark.parametrize("bound", [BOUND, 10**9], ids=["bounded", "unbounded"])
@pytest.mark.parametrize("which", [2, 5, 8])
def test_a_lost_episode_start_gives_no_episode_its_lanes_other_reset_observation(
        which, bound):
    """Under NEXT_STEP the roll after a lane's episode is the next one's reset observation:
    the lane's order of episodes comes from the groups that name them too, so an episode
    whose `episode_started` was lost (skipped, incomplete) still stands between its
    neighbours, and the one after it is not given its roll."""
    whole = _history(1, next_step=1.0, lanes=3, sessions=1, episodes=12)
    history = _losing(whole, EventType.EPISODE_STARTED, which)
    joiner = Joiner(Filters(), max_held_steps=bound)

    released = _once(_read(joiner, history, history.published) + joiner.release(final=True))

    expected, _ = _unbounded(whole, Filters())
    assert released == {k: expected[k] for k in released}
    assert len(released) == len(expected) - 1
    assert joiner.skipped == Counter({"incomplete": 1})


@pytest.mark.parametrize("cuts", [[0.5], [0.2, 0.5, 0.5], [0.3, 0.3, 0.3, 0.3]])
def test_a_session_found_misaligned_decides_each_episode_once_across_restarts(cuts):
    """Which episodes next to the loss are released depends on when the session was
    looked at; across restarts each is still released (with its values) or skipped as
    misaligned, once."""
    whole = _history(7, next_step=1.0, lanes=3, sessions=2, episodes=120)
    history = _losing(whole, EventType.STEP_COMPLETED, len(whole.topics[
        EventType.STEP_COMPLETED]) // 4)

    out, joiner = _restarted(history, Filters(), cuts, 7, published=True)

    released = _once(out)
    expected, _ = _unbounded(whole, Filters())
    assert released == {k: expected[k] for k in released}
    assert joiner.skipped["misaligned"] > 0
    assert joiner.skipped == Counter({"misaligned": len(expected) - len(released)})


def test_a_session_row_written_before_the_bound_loads_with_nothing_released_early():
    row = state.load(state.dump({"sessions": {"s": [True, False, False, [4, 2], 2]},
                                 "first": [], "skipped": {}, "skip_examples": {}},
                                Certificate()), "test")["sessions"]["s"]

    assert (row.early, row.early_done, row.dropped_real, row.exported) == ({}, 0, 0, 2)

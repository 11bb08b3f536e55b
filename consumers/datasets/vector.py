"""Releasing a vector-env session: its group steps split into each lane's whole episodes.

Called by the joiner once the session has ended and all its events were read
(`all_read`), or at the end of an offline run. The placement rules are in
groups.py; here each episode record of the session gets its verdict (skipped
with a reason, or built from its lane's observations, actions and steps).

A running session holding more than `max_held_steps` lane steps releases early
(`release_prefix`) the episodes whole in its groups read so far, and drops the groups no
episode still open needs: its memory is bounded by its open episodes, not its length. An
episode goes early only once what follows its last group on its lane is read too
(`_followed`) and its lane's steps end it there (`_ended_there`): a record lost can leave
the names in line. A session whose groups read whole do not line up is misaligned for
good: its groups are dropped as they are read whole, its episodes not released yet
skipped when it is released.
The session's state row keeps what a restart needs of the episodes released early (those
its kept groups still name, each lane's last: a roll after it gives the next episode its
reset observation), their count, and the lane steps of the groups dropped; its unit's
resume point is its first record kept per partition, below which a restart reads none of
its records again (the groups are numbered from 0 again there).
"""

from __future__ import annotations

from itertools import chain, pairwise
from typing import Any, Protocol

import numpy as np

from rlmesh_stream.consumers.datasets.groups import (
    GroupObservation,
    GroupSession,
    LaneValues,
    assemble,
    lane_steps,
    real_steps,
)
from rlmesh_stream.consumers.datasets.model import (
    TP,
    Episode,
    Filters,
    Key,
    PendingEpisode,
    SessionState,
    StepRow,
    Steps,
    Unit,
)
from rlmesh_stream.schemas.contract import events as ev
from rlmesh_stream.schemas.contract.errors import ContractError


class JoinerView(Protocol):
    """What releasing a session needs of the joiner (`episodes.Joiner`), which calls it:
    described here, not imported, so the two modules do not import each other."""

    filters: Filters
    pending: dict[Key, PendingEpisode]
    skip_examples: dict[str, str]
    def forget(self, unit: Unit) -> None: ...

    def move_first(self, unit: Unit, first: dict[TP, int]) -> None: ...

    def _skip(self, reason: str, ep: PendingEpisode) -> None: ...


def release_session(joiner: JoinerView, session_id: str, session: SessionState,
                    pending: dict[Key, PendingEpisode] | None = None) -> list[Episode]:
    """Every episode of an ended vector-env session (or of any at the end of a run);
    `pending`: the joiner's pending episodes of this session, if the caller has them."""
    groups = session.groups
    assert groups is not None
    if pending is None:
        pending = {k: ep for k, ep in joiner.pending.items() if k[0] == session_id}
    mine = {k[1]: ep for k, ep in pending.items()}
    if not session.ended and any(ep.completed is None for ep in mine.values()):
        return []  # still running at the end of the history: a later run decides
    found = assemble(groups, _lane_order(mine, session))
    problem = "misaligned" if session.misaligned else found.problem
    values = LaneValues(groups)
    whole: list[tuple[PendingEpisode, Any, np.ndarray]] = []
    for record, ep in sorted(mine.items()):
        del joiner.pending[(session_id, record)]
        joiner.forget(("e", session_id, record))
        verdict = _verdict(joiner, ep, session, problem)
        if verdict is not None:
            joiner._skip(verdict, ep)
            continue
        lane_ep = found.episodes.get(record)
        ks = _checked(joiner, ep, lane_ep, found.bad_groups, values)
        if ks is not None:
            whole.append((ep, lane_ep, ks))
    out = _built(joiner, session, values, whole)
    session.groups = None
    session.early = {}
    session.released_whole = session.ended
    joiner.forget(("s", session_id))
    return out


def _lane_order(mine: dict[str, PendingEpisode], session: SessionState) -> dict[int, list[str]]:
    """Each lane's episode records in start order: the pending ones started, those whose
    start is missing where the groups named them (a NEXT_STEP roll after an episode is the
    next one's reset observation: an episode left out would give the one after it its
    roll), and those released early that the session still remembers."""
    known = [(int(ep.started["env_index"]), ep.started.get("episode_index") or 0, record)
             for record, ep in mine.items() if ep.started is not None]
    known += [(ep.lane, index, record) for record, ep in mine.items()
              if ep.started is None and ep.lane is not None
              and (index := ev.episode_index_of(record)) is not None]
    known += [(lane, index, record) for record, (lane, index) in session.early.items()
              if record not in mine]
    lane_order: dict[int, list[str]] = {}
    for lane, _, record in sorted(known, key=lambda t: (t[1], t[2])):
        lane_order.setdefault(lane, []).append(record)
    return lane_order


def release_prefix(joiner: JoinerView, session_id: str, session: SessionState,
                   pending: dict[Key, PendingEpisode], limit: int) -> list[Episode]:
    """A running session holding too many group steps (more lane steps than `limit`): the
    episodes completed whole in its groups read so far (each group up to the first one
    missing its action, step or observation) are released now, and the groups below the
    first one an episode not released still needs are dropped. Groups that do not line up
    release nothing, and are dropped with every group read whole after them
    (`SessionState.misaligned`): the session's episodes not released yet are skipped as
    misaligned once it is released, as without the bound."""
    groups = session.groups
    assert groups is not None
    real_steps(groups)  # the groups to drop counted first
    end = groups.base
    while end in groups.actions and end in groups.steps and end in groups.observations:
        end += 1
    out: list[Episode] = []
    if end > groups.base and not session.misaligned:
        view = groups.prefix(end)
        mine = {k[1]: ep for k, ep in pending.items()}
        found = assemble(view, _lane_order(mine, session))
        # groups read whole that do not line up never will: every episode not released
        # yet is skipped as misaligned in the end, so none of its groups is needed
        session.misaligned = found.problem is not None
        if found.problem is None:
            out = _release_whole(joiner, session_id, session, mine, view, found.episodes, end)
            following = {(lane, a): b for lane, order in _lane_order(
                {r: ep for r, ep in mine.items() if (session_id, r) in joiner.pending},
                session).items() for a, b in pairwise(order)}
            drop = _first_needed(session, view, end, following)
            if drop > groups.base:
                _drop(joiner, session_id, session, drop)
    if session.misaligned and end > groups.base:
        _drop(joiner, session_id, session, end)
    # looked at again once it holds half the bound more, or half as much again: open
    # episodes holding many group steps are not walked again at every commit
    held = groups.held()
    groups.next_try = max(limit, held + max(limit // 2, held // 2))
    return out


def _release_whole(joiner: JoinerView, session_id: str, session: SessionState,
                   mine: dict[str, PendingEpisode], view: GroupSession,
                   found: dict[str, Any], end: int) -> list[Episode]:
    """The completed episodes whole in `view` (groups below `end`: every step there, a
    reset observation, what follows its last group, `_followed`, and steps ending it
    there, `_ended_there`): released, or skipped for a reason the whole session's release
    would give them too. The others wait: for a later look, or for the session's end,
    where the counts of its events show a record lost."""
    values = LaneValues(view)
    whole: list[tuple[PendingEpisode, Any, np.ndarray]] = []
    for record, ep in sorted(mine.items()):
        lane_ep = found.get(record)
        if (ep.completed is None or ep.started is None or ep.route is None or lane_ep is None
                or lane_ep.reset is None
                or len(lane_ep.groups) != int(ep.completed["step_count"])
                or not _followed(view, lane_ep, end) or not _ended_there(view, lane_ep)):
            continue  # open, or not whole here: left to a later look or the session's end
        del joiner.pending[(session_id, record)]
        joiner.forget(("e", session_id, record))
        session.early[record] = (lane_ep.lane, ep.started.get("episode_index") or 0)
        session.early_done += 1
        verdict = _verdict(joiner, ep, session, None)
        if verdict is not None:
            joiner._skip(verdict, ep)
            continue
        ks = _checked(joiner, ep, lane_ep, set(), values)
        if ks is not None:
            whole.append((ep, lane_ep, ks))
    return _built(joiner, session, values, whole)


def _followed(view: GroupSession, lane_ep: Any, end: int) -> bool:
    """What follows an episode's last group in `view` (groups below `end`) is read: the
    next group, or a driver's reset of its lane. A group observation lost just before a
    lane's NEXT_STEP roll leaves the roll's one in its place, naming the same episodes
    (the ended one's id kept), so the names take it for the terminal one; the next group
    names the lane's next episode where its action still names the ended one, and shows
    the loss. A driver's reset names the lane's next episode in the observation after the
    terminal one, so there the loss shows in the episode's own last group."""
    if not len(lane_ep.groups):
        return True
    after = int(lane_ep.groups[-1]) + 1
    lane = lane_ep.lane
    return after < end or any(r.before == after and lane < len(r.records) and r.records[lane]
                              for r in view.resets)


def _ended_there(view: GroupSession, lane_ep: Any) -> bool:
    """The lane's steps end its episode at its last group and nowhere before. A step lost
    while the primary lane has no episode (its (record, step) ("", 0) in every action and
    step) shifts the later ones with nothing in the names to show it: the shifted flags
    do (the end one group off)."""
    lane = lane_ep.lane
    steps = [view.steps[int(k)] for k in lane_ep.groups]
    ends = [lane < min(len(s.terminated), len(s.truncated))
            and bool(s.terminated[lane] or s.truncated[lane]) for s in steps]
    return bool(ends) and ends[-1] and not any(ends[:-1])


def _needed(obs: GroupObservation, early: dict[str, Any]) -> bool:
    """A reset observation naming an episode not released yet."""
    return any(record and record not in early for record in obs.records)


def _first_needed(session: SessionState, view: GroupSession, end: int,
                  following: dict[tuple[int, str], str]) -> int:
    """The first group still needed: one holding a lane of an episode not released, or
    a roll whose next episode (its reset observation) is not released or not known yet,
    or the first whose observation comes after a reset observation still needed."""
    early = session.early
    first = end
    for obs in view.resets:  # in publishing order: their places ascending
        if _needed(obs, early):
            first = min(first, obs.before)
            break
    for k in range(view.base, first):
        records, rolls = view.actions[k].records, view.steps[k].rolls
        for lane, record in enumerate(records):
            if not record:
                continue
            if record not in early:
                return k
            if lane < len(rolls) and rolls[lane]:
                after = following.get((lane, record))
                if after is not None and after in early:
                    continue
                nxt = view.actions.get(k + 1)
                if after is None and nxt is not None and lane < len(nxt.records) and (
                        not nxt.records[lane]):
                    continue  # the lane's last roll: no episode begins from it
                return k
    return first


def _drop(joiner: JoinerView, session_id: str, session: SessionState, drop: int) -> None:
    """Groups `base`..`drop - 1` and the reset observations before group `drop`'s (none
    still needed) are forgotten; the session's resume point moves to its first record
    kept in each partition (past its last one dropped where none is kept)."""
    groups = session.groups
    assert groups is not None and groups.counted >= drop
    gone = list(range(groups.base, drop))
    session.dropped_real += lane_steps(groups, gone)
    last: dict[TP, int] = {}
    dropped: list[Any] = [groups.actions.pop(k) for k in gone]
    dropped += [groups.steps.pop(k) for k in gone]
    dropped += [groups.observations.pop(k) for k in gone]
    resets = groups.resets
    cut = 0
    while cut < len(resets) and (resets[cut].before < drop or (
            resets[cut].before == drop and not _needed(resets[cut], session.early))):
        cut += 1
    dropped += resets[:cut]
    del resets[:cut]
    groups.base = drop
    for item in dropped:
        if item.at is not None:
            tp, offset = item.at
            last[tp] = max(last.get(tp, offset), offset)
    unit = ("s", session_id)
    first: dict[TP, int] = {}
    kept: Any = chain(resets, groups.actions.values(), groups.steps.values(),
                      groups.observations.values())
    for item in kept:
        if item.at is not None:
            tp, offset = item.at
            first[tp] = min(first.get(tp, offset), offset)
    for tp, offset in last.items():
        first.setdefault(tp, offset + 1)
    joiner.move_first(unit, first)
    _forget_early(session, groups, joiner.pending, session_id)


def _forget_early(session: SessionState, groups: GroupSession,
                  pending: dict[Key, PendingEpisode], session_id: str) -> None:
    """Of the episodes released early, remember only those the kept groups name and each
    lane's last (its roll may come later): at most a few per lane, the state row small."""
    named = set(chain.from_iterable(a.records for a in groups.actions.values()))
    named.update(chain.from_iterable(o.records for o in groups.observations.values()))
    named.update(chain.from_iterable(o.records for o in groups.resets))
    last: dict[int, tuple[int, str]] = {}
    for record, (lane, index) in session.early.items():
        if lane not in last or last[lane][0] < index:
            last[lane] = (index, record)
    keep = named | {record for _, record in last.values()}
    session.early = {r: v for r, v in session.early.items() if r in keep}
    groups.known = {r for r in groups.known
                    if r in session.early or (session_id, r) in pending}


def _verdict(joiner: JoinerView, ep: PendingEpisode, session: SessionState,
                   problem: str | None) -> str | None:
    if ep.route is not None and not joiner.filters.wants(ep.route):
        return "filtered"
    if problem is not None:
        return problem
    if ep.completed is None:
        if session.failed:
            return None if joiner.filters.include_abandoned else "abandoned"
        return "incomplete"
    if session.caution and joiner.filters.exclude_caution:
        return "caution"
    return None

def _checked(joiner: JoinerView, ep: PendingEpisode, lane_ep: Any, bad: set[int],
             values: LaneValues) -> np.ndarray | None:
    """The group steps of an episode whole in the groups, or None (skipped, counted)."""
    groups = values.session
    if lane_ep is None or ep.route is None or ep.started is None:
        joiner._skip("incomplete", ep)
        return None
    steps = len(lane_ep.groups) if ep.completed is None else int(ep.completed["step_count"])
    if len(lane_ep.groups) != steps or (bad and any(int(k) in bad for k in lane_ep.groups)):
        joiner._skip("incomplete", ep)
        return None
    if steps == 0:
        joiner._skip("empty", ep)
        return None
    if lane_ep.reset is None:
        joiner._skip("no_reset_observation", ep)
        return None
    ks = np.asarray(lane_ep.groups, dtype=np.intp)
    if not values.uniform_specs():  # else one space for the whole session
        specs = {groups.actions[k].spec for k in ks.tolist()}
        obs_specs = {groups.observations[k].spec for k in ks.tolist()}
        obs_specs.add(groups.observation_at(lane_ep.reset[0]).spec)
        if len(specs) > 1 or len(obs_specs) > 1:
            joiner._skip("space_changed", ep)
            return None
    return ks


def _built(joiner: JoinerView, session: SessionState, values: LaneValues,
           whole: list[tuple[PendingEpisode, Any, np.ndarray]]) -> list[Episode]:
    """The episodes `_checked` found whole, in that order. For one-leaf spaces every
    episode's observations, actions and steps are cut from the session's arrays by one
    indexing per array for the whole session, split per episode (views); else lane by
    lane, value by value."""
    if not whole:
        return []
    groups = values.session
    lanes = [lane_ep.lane for _, lane_ep, _ in whole]
    ks = np.concatenate([k for _, _, k in whole])
    at = np.repeat(np.asarray(lanes, dtype=np.intp), [len(k) for _, _, k in whole])
    ends = np.cumsum([len(k) for _, _, k in whole]).tolist()
    bounds = list(zip([0, *ends[:-1]], ends, strict=True))

    def split(array: np.ndarray) -> list[np.ndarray]:
        return [array[a:b] for a, b in bounds]

    obs_all, act_all = values.whole("obs"), values.whole("act")
    rows = ks - groups.base  # group k in row k - base
    if obs_all is not None and act_all is not None and max(lanes) < min(
            obs_all.shape[1], act_all.shape[1]):
        obs_parts: Any = split(obs_all[rows, at])
        act_parts: Any = split(act_all[rows, at])
    else:
        obs_parts = act_parts = [None] * len(whole)
    columns = values.step_columns()
    if columns is not None and max(lanes) < columns[0].shape[1]:
        rewards, terminated, truncated = (split(c[rows, at]) for c in columns)
        steps_of = [Steps(*row) for row in zip(rewards, terminated, truncated, strict=True)]
    else:  # groups of different widths: group by group
        steps_of = [Steps.of_rows([
            StepRow(groups.steps[k].rewards[lane], groups.steps[k].terminated[lane],
                    groups.steps[k].truncated[lane], None) for k in k_of.tolist()])
            for (_, lane_ep, k_of), lane in zip(whole, lanes, strict=True)]
    out = []
    for (ep, lane_ep, k_of), obs, act, steps in zip(whole, obs_parts, act_parts, steps_of,
                                                    strict=True):
        lane = lane_ep.lane
        try:
            if obs is not None:  # one array each
                reset = values.reset_observation(lane_ep.reset[0], lane)
                observations: Any = np.concatenate([np.asarray(reset)[None], obs])
                actions: Any = act
            else:  # value by value (several leaves, text, or a bad slab somewhere)
                observations = [values.observation(lane_ep.reset[0], lane)] + [
                    values.observation(k, lane) for k in k_of.tolist()]
                actions = [values.action(k, lane) for k in k_of.tolist()]
        except ContractError as exc:
            joiner._skip("bad_leaves", ep)
            joiner.skip_examples.setdefault("bad_leaves_error", str(exc))
            continue
        first = int(k_of[0])
        obs_spec, act_spec = groups.observations[first].spec, groups.actions[first].spec
        assert ep.route is not None and ep.started is not None  # `_checked`
        out.append(Episode(
            session_id=ep.session_id, record_id=ep.record_id, route=ep.route,
            started=ep.started, completed=ep.completed, observations=observations,
            actions=actions, steps=steps, obs_spec=values.space(obs_spec),
            act_spec=values.space(act_spec), terminal_observation=True,
            abandoned=ep.completed is None, caution=session.caution,
            spaces=values.space_bytes(obs_spec, act_spec)))
    return out


def all_read(session: SessionState, pending: dict[Key, PendingEpisode], session_id: str) -> bool:
    """An ended vector-env session whose events have all been read (its end event can be
    read before them): its totals match the groups and the episodes read, each with its
    started and completed events."""
    groups = session.groups
    if groups is None or session.totals is None:
        return False  # running, or failed (no totals): decided at the end of a run
    total_steps, total_episodes = session.totals
    if not len(groups.actions) == len(groups.steps) == len(groups.observations):
        return False
    if real_steps(groups) != total_steps:  # first: counted as the groups arrive
        return False
    # every episode completed, and started: each event type is a topic of its own, so a
    # checkpoint can come before the episode_started events are read (the session was
    # released then, its episodes skipped as incomplete)
    completed = [ep for (sid, _), ep in pending.items()
                 if sid == session_id and ep.completed is not None]
    return (len(completed) + session.early_done == total_episodes
            and all(ep.started is not None for ep in completed))

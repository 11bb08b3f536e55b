"""Releasing a vector-env session: its group steps split into each lane's whole episodes.

Called by the joiner once the session has ended and all its events were read
(`all_read`), or at the end of an offline run. The placement rules are in
groups.py; here each episode record of the session gets its verdict (skipped
with a reason, or built from its lane's observations, actions and steps).
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from rlmesh_stream.consumers.datasets.groups import LaneValues, assemble, real_steps
from rlmesh_stream.consumers.datasets.model import (
    Episode,
    Filters,
    Key,
    PendingEpisode,
    SessionState,
    StepRow,
    Steps,
    Unit,
)
from rlmesh_stream.schemas.contract.errors import ContractError


class JoinerView(Protocol):
    """What releasing a session needs of the joiner (`episodes.Joiner`), which calls it:
    described here, not imported, so the two modules do not import each other."""

    filters: Filters
    pending: dict[Key, PendingEpisode]
    skip_examples: dict[str, str]
    def forget(self, unit: Unit) -> None: ...

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
    lane_order: dict[int, list[str]] = {}
    for record, ep in sorted(mine.items(), key=lambda kv: (
            (kv[1].started or {}).get("episode_index") or 0, kv[0])):
        if ep.started is not None:
            lane_order.setdefault(int(ep.started["env_index"]), []).append(record)
    found = assemble(groups, lane_order)
    values = LaneValues(groups)
    whole: list[tuple[PendingEpisode, Any, np.ndarray]] = []
    for record, ep in sorted(mine.items()):
        del joiner.pending[(session_id, record)]
        joiner.forget(("e", session_id, record))
        verdict = _verdict(joiner, ep, session, found.problem)
        if verdict is not None:
            joiner._skip(verdict, ep)
            continue
        lane_ep = found.episodes.get(record)
        ks = _checked(joiner, ep, lane_ep, found.bad_groups, values)
        if ks is not None:
            whole.append((ep, lane_ep, ks))
    out = _built(joiner, session, values, whole)
    session.groups = None
    joiner.forget(("s", session_id))
    return out


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
    if obs_all is not None and act_all is not None and max(lanes) < min(
            obs_all.shape[1], act_all.shape[1]):
        obs_parts: Any = split(obs_all[ks, at])
        act_parts: Any = split(act_all[ks, at])
    else:
        obs_parts = act_parts = [None] * len(whole)
    columns = values.step_columns()
    if columns is not None and max(lanes) < columns[0].shape[1]:
        rewards, terminated, truncated = (split(c[ks, at]) for c in columns)
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
    return len(completed) == total_episodes and all(ep.started is not None for ep in completed)

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
from rlmesh_stream.schemas.contract import events as ev
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
    out = []
    for record, ep in sorted(mine.items()):
        del joiner.pending[(session_id, record)]
        joiner.forget(("e", session_id, record))
        verdict = _verdict(joiner, ep, session, found.problem)
        if verdict is not None:
            joiner._skip(verdict, ep)
            continue
        lane_ep = found.episodes.get(record)
        built = _build_lane(joiner, ep, session, lane_ep, found.bad_groups, values)
        if built is not None:
            out.append(built)
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

def _build_lane(joiner: JoinerView, ep: PendingEpisode, session: SessionState, lane_ep: Any,
                bad: set[int], values: LaneValues) -> Episode | None:
    groups = session.groups
    assert groups is not None
    if lane_ep is None or ep.route is None or ep.started is None:
        joiner._skip("incomplete", ep)
        return None
    abandoned = ep.completed is None
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
    first = int(ks[0])
    if values.uniform_specs():  # one space for the whole session: nothing to compare
        specs = {groups.actions[first].spec}
        obs_specs = {groups.observations[first].spec}
    else:
        specs = {groups.actions[k].spec for k in ks.tolist()}
        obs_specs = {groups.observations[k].spec for k in ks.tolist()}
        obs_specs.add(groups.observation_at(lane_ep.reset[0]).spec)
    if len(specs) > 1 or len(obs_specs) > 1:
        joiner._skip("space_changed", ep)
        return None
    lane = lane_ep.lane
    try:
        observations: Any = values.stacked("obs", ks, lane)
        actions: Any = values.stacked("act", ks, lane)
        if observations is not None and actions is not None:  # one array each
            reset = values.reset_observation(lane_ep.reset[0], lane)
            observations = np.concatenate([np.asarray(reset)[None], observations])
        else:  # value by value (several leaves, text, or a bad slab somewhere)
            reset = values.observation(lane_ep.reset[0], lane)
            observations = [reset] + [values.observation(k, lane) for k in ks.tolist()]
            actions = [values.action(k, lane) for k in ks.tolist()]
    except ContractError as exc:
        joiner._skip("bad_leaves", ep)
        joiner.skip_examples.setdefault("bad_leaves_error", str(exc))
        return None
    columns = values.step_columns()
    if columns is not None and lane < columns[0].shape[1]:
        rewards, terminated, truncated = columns
        steps_of = Steps(rewards[ks, lane], terminated[ks, lane], truncated[ks, lane])
    else:  # groups of different widths: group by group
        rows = [StepRow(groups.steps[k].rewards[lane], groups.steps[k].terminated[lane],
                        groups.steps[k].truncated[lane], None) for k in ks.tolist()]
        steps_of = Steps.of_rows(rows)
    obs_spec, act_spec = ev.SpaceSpec(), ev.SpaceSpec()
    obs_spec.ParseFromString(obs_specs.pop())
    if specs:
        act_spec.ParseFromString(specs.pop())
    return Episode(
        session_id=ep.session_id, record_id=ep.record_id, route=ep.route,
        started=ep.started, completed=ep.completed, observations=observations,
        actions=actions, steps=steps_of, obs_spec=obs_spec, act_spec=act_spec,
        terminal_observation=True, abandoned=abandoned, caution=session.caution)


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

"""Vector-env sessions: group-step events split into each lane's episodes.

A session of N > 1 lanes publishes, per group step, one `action_received`,
one `step_completed` and one `observation_emitted` carrying every lane (spec
sections 2 and 3), after one reset observation. Their scalar `step` is the
primary lane's, so it cannot place other lanes' steps; what does is order:
a session's events of one type sit in one partition, in publishing order, so
the k-th action, the k-th step and the k-th non-reset observation of a session
are its group step k. The primary lane's (record, step) must agree between
the k-th action and step, and the k-th observation must name the action's
lanes (a roll's observation keeps the ended episode's id): if not (a record
lost or dead-lettered), the session's episodes are skipped as `misaligned`
rather than assembled wrongly.

Per lane, a group step is a step of the episode named in the action's
`episode_record_ids[lane]`, unless `autoreset_roll[lane]`: under NEXT_STEP a
roll's observation is the reset observation of the lane's next episode.
Reset observations (`is_reset`) are not group steps: the session's first
names every lane's first episode, and one a driver publishes when it resets
some lanes in place names the new episodes of those lanes ("" elsewhere).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rlmesh_stream.schemas.codec.leaves import LeafDecoder
from rlmesh_stream.schemas.contract import events as ev
from rlmesh_stream.schemas.contract.errors import ContractError


@dataclass
class GroupAction:
    primary: tuple[str, int]
    records: list[str]
    leaves: list[bytes] | None
    spec: bytes


@dataclass
class GroupStep:
    primary: tuple[str, int]
    rewards: list[float]
    terminated: list[bool]
    truncated: list[bool]
    rolls: list[bool]


@dataclass
class GroupObservation:
    records: list[str]
    leaves: list[bytes] | None
    spec: bytes


@dataclass
class GroupSession:
    """Every group event of one vector-env session, by group step (kept until it ends)."""

    lanes: int
    resets: list[GroupObservation] = field(default_factory=list)  # in publishing order
    actions: dict[int, GroupAction] = field(default_factory=dict)
    steps: dict[int, GroupStep] = field(default_factory=dict)
    observations: dict[int, GroupObservation] = field(default_factory=dict)
    # the joiner's: the records it made pending episodes of, and the last group step's
    # lanes (a group step naming the same records as the one before makes none)
    known: set[str] = field(default_factory=set)
    known_records: list[str] = field(default_factory=list)

    def add_observation(self, records: list[str], leaves: list[bytes] | None, spec: bytes,
                        is_reset: bool) -> None:
        """A group observation (`spec`: the space serialised)."""
        obs = GroupObservation(records, leaves, spec)
        if is_reset:
            self.resets.append(obs)
        else:
            self.observations[len(self.observations)] = obs

    def observation_at(self, group: int) -> GroupObservation:
        """Group k's observation, or for k < 0 the (-1 - k)-th reset observation."""
        return self.resets[-1 - group] if group < 0 else self.observations[group]

    def add_action(self, record: str, step: int, records: list[str],
                   leaves: list[bytes] | None, spec: bytes) -> None:
        """A group action: the primary lane's (record, step), every lane's record."""
        self.actions[len(self.actions)] = GroupAction((record, step), records, leaves, spec)

    def add_step(self, record: str, step: int, rewards: list[float], terminated: list[bool],
                 truncated: list[bool], rolls: list[bool]) -> None:
        """A group step: the primary lane's (record, step), every lane's outcome."""
        self.steps[len(self.steps)] = GroupStep((record, step), rewards, terminated,
                                                truncated, rolls)


@dataclass
class LaneEpisode:
    """One lane's episode as found in the groups: its reset observation and its groups."""

    lane: int
    # (group k, or -1 - r for the session's r-th reset observation; lane)
    reset: tuple[int, int] | None = None
    groups: list[int] = field(default_factory=list)


@dataclass
class Assembly:
    """What the groups say about each episode record of the session."""

    episodes: dict[str, LaneEpisode]
    problem: str | None  # a reason every episode of the session is skipped
    bad_groups: set[int]
    values: Any  # (kind, group) -> per-lane decoded values


def assemble(session: GroupSession, lane_order: dict[int, list[str]]) -> Assembly:
    """Walk the groups lane by lane; `lane_order`: each lane's record ids in start order."""
    total = max(len(session.actions), len(session.steps))
    bad = {k for k in range(total) if k not in session.actions or k not in session.steps
           or k not in session.observations}
    if len(session.observations) != len(session.steps) or not (
            0 <= len(session.actions) - len(session.steps) <= 1):
        # an event missing somewhere (only a failed session's last action may lack its step):
        # which group it was cannot be known, so no lane can be placed with certainty
        return Assembly({}, "misaligned", bad, None)
    for k in range(total):
        action, step, obs = (session.actions.get(k), session.steps.get(k),
                             session.observations.get(k))
        if action is not None and ((step is not None and action.primary != step.primary)
                                   or (obs is not None and obs.records != action.records)):
            return Assembly({}, "misaligned", bad, None)
    episodes: dict[str, LaneEpisode] = {}

    def episode(record: str, lane: int) -> LaneEpisode:
        ep = episodes.get(record)
        if ep is None:
            ep = episodes[record] = LaneEpisode(lane)
        return ep

    for r, reset in enumerate(session.resets):
        for lane, record in enumerate(reset.records):
            if record and episode(record, lane).reset is None:
                episode(record, lane).reset = (-1 - r, lane)
    for k in range(total):
        action, step = session.actions.get(k), session.steps.get(k)
        if action is None or step is None:
            continue
        for lane, record in enumerate(action.records):
            if not record or lane >= len(step.rolls):
                continue
            if step.rolls[lane]:
                following = _next_on_lane(lane_order.get(lane, []), record)
                if following is not None:
                    episode(following, lane).reset = (k, lane)
                continue
            episode(record, lane).groups.append(k)
    return Assembly(episodes, None, bad, None)


def _next_on_lane(order: list[str], record: str) -> str | None:
    try:
        at = order.index(record)
    except ValueError:
        return None
    return order[at + 1] if at + 1 < len(order) else None


class LaneValues:
    """Decodes a group's slab once and hands out lanes (ContractError for bad bytes)."""

    def __init__(self, session: GroupSession) -> None:
        self.session = session
        self._cache: dict[tuple[str, int], list[Any]] = {}
        self._decoders: dict[bytes, LeafDecoder] = {}
        self._stacked: dict[str, np.ndarray | None] = {}

    def _decoder(self, spec: bytes) -> LeafDecoder:
        decoder = self._decoders.get(spec)
        if decoder is None:
            parsed = ev.SpaceSpec()
            parsed.ParseFromString(spec)
            decoder = self._decoders[spec] = LeafDecoder(parsed)
        return decoder

    def observation(self, group: int, lane: int) -> Any:
        obs = self.session.observation_at(group)
        return self._lane(("obs", group), obs.leaves, obs.spec, len(obs.records), lane)

    def action(self, group: int, lane: int) -> Any:
        act = self.session.actions[group]
        return self._lane(("act", group), act.leaves, act.spec, len(act.records), lane)

    def stacked(self, kind: str, groups: list[int], lane: int) -> np.ndarray | None:
        """One lane's values of `groups` (group steps, not resets) as one (T, *shape)
        array, for a space of one array leaf whose every group slab of `kind` ("obs" or
        "act") in the session is whole: the session's slabs are joined and read once, and
        each episode is one indexing (no value per step). None: read value by value (the
        per-value path names a bad slab)."""
        if kind not in self._stacked:
            self._stacked[kind] = self._stack(
                self.session.observations if kind == "obs" else self.session.actions)
        whole = self._stacked[kind]
        if whole is None or not groups or lane >= whole.shape[1]:
            return None
        return whole[np.asarray(groups, dtype=np.intp), lane]

    def _stack(self, items: dict[int, Any]) -> np.ndarray | None:
        if not items:
            return None
        first = items[0] if 0 in items else next(iter(items.values()))
        n, spec = len(first.records), first.spec
        if len(items) != max(items) + 1 or any(
                v.spec != spec or v.leaves is None or len(v.leaves) != 1
                or len(v.records) != n for v in items.values()):
            return None
        leaves = self._decoder(spec).leaves
        if len(leaves) != 1 or leaves[0].kind == "text" or leaves[0].path:
            return None
        leaf = leaves[0]
        width = int(np.prod(leaf.shape, dtype=np.int64)) * leaf.dtype.itemsize * n
        slabs = [items[k].leaves[0] for k in range(len(items))]
        if any(len(slab) != width for slab in slabs):
            return None
        array = np.frombuffer(b"".join(slabs), dtype=leaf.dtype)
        native = leaf.dtype.newbyteorder("=")
        if native != leaf.dtype:
            array = array.astype(native)
        return array.reshape((len(slabs), n, *leaf.shape))

    def _lane(self, key: tuple[str, int], leaves: list[bytes] | None, spec: bytes, n: int,
              lane: int) -> Any:
        values = self._cache.get(key)
        if values is None:
            if leaves is None:
                raise ContractError("leaves", key[0], None, "leaves were omitted by the producer")
            values = self._cache[key] = self._decoder(spec).decode_lanes(leaves, n)
        return values[lane]

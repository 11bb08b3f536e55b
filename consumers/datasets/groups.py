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
from itertools import chain, pairwise
from typing import Any, Literal

import numpy as np

from rlmesh_stream.consumers.runtime.records import TP
from rlmesh_stream.schemas.codec.leaves import LeafDecoder
from rlmesh_stream.schemas.contract import events as ev
from rlmesh_stream.schemas.contract.errors import ContractError

Where = tuple[TP, int]  # a record's (topic, partition) and offset


@dataclass
class GroupAction:
    primary: tuple[str, int]
    records: list[str]
    leaves: list[bytes] | None
    spec: bytes
    at: Where | None = None


@dataclass
class GroupStep:
    primary: tuple[str, int]
    rewards: list[float]
    terminated: list[bool]
    truncated: list[bool]
    rolls: list[bool]
    at: Where | None = None


@dataclass
class GroupObservation:
    records: list[str]
    leaves: list[bytes] | None
    spec: bytes
    at: Where | None = None
    # a reset observation's place: the group step whose observation comes next
    before: int = 0


@dataclass
class GroupSession:
    """The group events of one vector-env session held, by group step k: from `base` on
    (the groups below were dropped once no episode held needed them, vector.py's
    `release_prefix`; after a restart k counts again from 0 at the first group kept)."""

    lanes: int
    resets: list[GroupObservation] = field(default_factory=list)  # in publishing order
    actions: dict[int, GroupAction] = field(default_factory=dict)
    steps: dict[int, GroupStep] = field(default_factory=dict)
    observations: dict[int, GroupObservation] = field(default_factory=dict)
    # the joiner's: the records it made pending episodes of, and the last group step's
    # lanes (a group step naming the same records as the one before makes none)
    known: set[str] = field(default_factory=set)
    known_records: list[str] = field(default_factory=list)
    # `real_steps`'s running count: the groups counted so far (0..counted-1) and their
    # lane steps; kept by that function alone, as the groups are looked at
    counted: int = 0
    real: int = 0
    base: int = 0  # the lowest group step held
    # the held lane steps past which the groups are looked at again for episodes to release
    # early (`release_prefix`): not at every commit while open episodes hold them
    next_try: int = 0

    def held(self) -> int:
        """The lane steps held: groups held times lanes."""
        return max(len(self.actions), len(self.steps), len(self.observations)) * self.lanes

    def prefix(self, end: int) -> GroupSession:
        """The groups `base`..`end - 1` (each with its action, step and observation) and
        every reset observation, numbered as here: a view, nothing copied but the dicts."""
        keys = range(self.base, end)
        return GroupSession(self.lanes, self.resets, {k: self.actions[k] for k in keys},
                            {k: self.steps[k] for k in keys},
                            {k: self.observations[k] for k in keys}, base=self.base)

    def add_observation(self, records: list[str], leaves: list[bytes] | None, spec: bytes,
                        is_reset: bool, at: Where | None = None) -> None:
        """A group observation (`spec`: the space serialised)."""
        k = self.base + len(self.observations)
        obs = GroupObservation(records, leaves, spec, at, k)
        if is_reset:
            self.resets.append(obs)
        else:
            self.observations[k] = obs

    def observation_at(self, group: int) -> GroupObservation:
        """Group k's observation, or for k < 0 the (-1 - k)-th reset observation."""
        return self.resets[-1 - group] if group < 0 else self.observations[group]

    def add_action(self, record: str, step: int, records: list[str],
                   leaves: list[bytes] | None, spec: bytes, at: Where | None = None) -> None:
        """A group action: the primary lane's (record, step), every lane's record."""
        self.actions[self.base + len(self.actions)] = GroupAction(
            (record, step), records, leaves, spec, at)

    def add_step(self, record: str, step: int, rewards: list[float], terminated: list[bool],
                 truncated: list[bool], rolls: list[bool], at: Where | None = None) -> None:
        """A group step: the primary lane's (record, step), every lane's outcome."""
        self.steps[self.base + len(self.steps)] = GroupStep(
            (record, step), rewards, terminated, truncated, rolls, at)


@dataclass
class LaneEpisode:
    """One lane's episode as found in the groups: its reset observation and its groups."""

    lane: int
    # (group k, or -1 - r for the session's r-th reset observation; lane)
    reset: tuple[int, int] | None = None
    groups: Any = field(default_factory=list)  # its group steps k, ascending (a list or array)


@dataclass
class Assembly:
    """What the groups say about each episode record of the session."""

    episodes: dict[str, LaneEpisode]
    problem: str | None  # a reason every episode of the session is skipped
    bad_groups: set[int]
    values: Any  # (kind, group) -> per-lane decoded values


def real_steps(session: GroupSession) -> int:
    """The lane steps of the session's groups read so far with both their action and step:
    the lanes naming an episode that did not roll (what `session_ended` counts in
    `total_steps`). Counted once per group as the groups arrive (`counted`, `real`),
    not again at every commit: a group's action and step never change once read."""
    actions, steps = session.actions, session.steps
    k, real = session.counted, session.real
    new = []
    while k in actions and k in steps:
        new.append(k)
        k += 1
    real += lane_steps(session, new)
    session.counted, session.real = k, real
    return real


def lane_steps(session: GroupSession, ks: list[int]) -> int:
    """The lane steps (lanes naming an episode that did not roll) of groups `ks`, each
    with its action and step."""
    if not ks:
        return 0
    records = [session.actions[g].records for g in ks]
    rolls = [session.steps[g].rolls for g in ks]
    lanes = len(records[0])
    if all(len(r) == lanes for r in records) and all(len(r) == lanes for r in rolls):
        size = lanes * len(ks)
        named = np.fromiter(map(bool, chain.from_iterable(records)), bool, size)
        rolled = np.fromiter(chain.from_iterable(rolls), bool, size)
        return int(np.count_nonzero(named & ~rolled))
    return sum(1 for names, rolled_of in zip(records, rolls, strict=True)  # of different widths
               for lane in range(min(len(names), len(rolled_of)))
               if names[lane] and not rolled_of[lane])


def assemble(session: GroupSession, lane_order: dict[int, list[str]]) -> Assembly:
    """Walk the groups lane by lane; `lane_order`: each lane's record ids in start order."""
    base = session.base
    total = range(base, base + max(len(session.actions), len(session.steps)))
    bad = {k for k in total if k not in session.actions or k not in session.steps
           or k not in session.observations}
    if len(session.observations) != len(session.steps) or not (
            0 <= len(session.actions) - len(session.steps) <= 1):
        # an event missing somewhere (only a failed session's last action may lack its step):
        # which group it was cannot be known, so no lane can be placed with certainty
        return Assembly({}, "misaligned", bad, None)
    for k in total:
        action, step, obs = (session.actions.get(k), session.steps.get(k),
                             session.observations.get(k))
        if action is not None and ((step is not None and action.primary != step.primary)
                                   or (obs is not None and obs.records != action.records)):
            return Assembly({}, "misaligned", bad, None)
    episodes: dict[str, LaneEpisode] = {}
    for r, reset in enumerate(session.resets):
        for lane, record in enumerate(reset.records):
            if record and record not in episodes:
                episodes[record] = LaneEpisode(lane, (-1 - r, lane))
            elif record and episodes[record].reset is None:
                episodes[record].reset = (-1 - r, lane)
    placed = [k for k in total if k in session.actions and k in session.steps]
    # per lane, the episode started after each (a roll's observation is its reset one)
    following = {(lane, a): b for lane, order in lane_order.items()
                 for a, b in pairwise(order)}
    if not _placed_by_arrays(session, placed, following, episodes):
        _placed_one_by_one(session, placed, following, episodes)
    return Assembly(episodes, None, bad, None)


def _placed_one_by_one(session: GroupSession, placed: list[int],
                       following: dict[tuple[int, str], str],
                       episodes: dict[str, LaneEpisode]) -> None:
    """Each group's lanes placed in Python (groups of different widths)."""
    for k in placed:
        action, step = session.actions[k], session.steps[k]
        for lane, record in enumerate(action.records):
            if not record or lane >= len(step.rolls):
                continue
            if step.rolls[lane]:
                after = following.get((lane, record))
                if after is not None:
                    episodes.setdefault(after, LaneEpisode(lane)).reset = (k, lane)
                continue
            episodes.setdefault(record, LaneEpisode(lane)).groups.append(k)


def _placed_by_arrays(session: GroupSession, placed: list[int],
                      following: dict[tuple[int, str], str],
                      episodes: dict[str, LaneEpisode]) -> bool:
    """`_placed_one_by_one` over a (groups, lanes) array of record codes, for groups all
    as wide as the first: numpy finds each record's groups (one sort), Python looks at
    each record and roll once, not at each lane of each group. False: groups of
    different widths (placed one by one)."""
    if not placed:
        return True
    actions = [session.actions[k] for k in placed]
    rolls_rows = [session.steps[k].rolls for k in placed]
    lanes = len(actions[0].records)
    if any(len(a.records) != lanes for a in actions) or any(
            len(r) != lanes for r in rolls_rows):
        return False
    flat = list(chain.from_iterable(a.records for a in actions))
    index = dict.fromkeys(flat)  # the records in order of first appearance
    names = list(index)
    for code, name in enumerate(names):
        index[name] = code
    codes = np.fromiter(map(index.__getitem__, flat), np.int64, len(flat))
    rolls = np.fromiter(chain.from_iterable(rolls_rows), bool, len(flat))
    named = codes != index[""] if "" in index else np.ones(len(flat), bool)
    ks = np.asarray(placed, dtype=np.int64)
    for at in np.flatnonzero(rolls & named).tolist():  # one roll per ended episode
        lane = at % lanes
        after = following.get((lane, names[codes[at]]))
        if after is not None:
            ep = episodes.get(after)
            if ep is None:
                ep = episodes[after] = LaneEpisode(lane)
            ep.reset = (int(ks[at // lanes]), lane)  # the last roll naming it wins
    steps_at = np.flatnonzero(~rolls & named)
    by_record = np.argsort(codes[steps_at], kind="stable")  # each record's steps k-major
    ordered = steps_at[by_record]
    record_codes = codes[ordered]
    bounds = np.flatnonzero(np.diff(record_codes)) + 1
    starts = np.concatenate([[0], bounds]).tolist() if len(ordered) else []
    ends = [*starts[1:], len(ordered)] if starts else []
    groups_of = ks[ordered // lanes]
    for start, end in zip(starts, ends, strict=True):
        record = names[record_codes[start]]
        ep = episodes.get(record)
        if ep is None:  # the lane it was first met on
            ep = episodes[record] = LaneEpisode(int(ordered[start]) % lanes)
        ep.groups = groups_of[start:end]
    return True


# The spaces' parsed SpaceSpecs and decoders, by their bytes, for every session (a fleet's
# sessions share a few spaces: made once, not per session); emptied past this many
_KEPT_SPACES = 256
_SPACES: dict[bytes, ev.SpaceSpec] = {}
_DECODERS: dict[bytes, LeafDecoder] = {}


class LaneValues:
    """Decodes a group's slab once and hands out lanes (ContractError for bad bytes)."""

    def __init__(self, session: GroupSession) -> None:
        self.session = session
        self._cache: dict[tuple[str, int], list[Any]] = {}
        self._stacked: dict[str, np.ndarray | None] = {}
        self._steps: tuple[np.ndarray, np.ndarray, np.ndarray] | Literal[False] | None = None
        self._uniform: bool | None = None
        self._space_bytes: dict[tuple[bytes, bytes], tuple[bytes, bytes]] = {}

    def _decoder(self, spec: bytes) -> LeafDecoder:
        decoder = _DECODERS.get(spec)
        if decoder is None:
            if len(_DECODERS) >= _KEPT_SPACES:
                _DECODERS.clear()
            decoder = _DECODERS[spec] = LeafDecoder(self.space(spec))
        return decoder

    def reset_observation(self, group: int, lane: int) -> Any:
        """An episode's first observation: a roll's from the group steps' observations
        read as one array (`whole`), when they can be, else decoded from its group."""
        whole = self.whole("obs")
        if group >= 0 and whole is not None and lane < whole.shape[1]:
            return whole[group - self.session.base, lane]
        return self.observation(group, lane)

    def observation(self, group: int, lane: int) -> Any:
        obs = self.session.observation_at(group)
        return self._lane(("obs", group), obs.leaves, obs.spec, len(obs.records), lane)

    def action(self, group: int, lane: int) -> Any:
        act = self.session.actions[group]
        return self._lane(("act", group), act.leaves, act.spec, len(act.records), lane)

    def step_columns(self) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """The session's rewards (float64), terminated and truncated (bool) as (G, lanes)
        arrays, group k in row k - base, built once; None when the groups are not numbered
        base..base+G-1 or differ in width (each lane's steps then read group by group)."""
        if self._steps is None:
            steps, base = self.session.steps, self.session.base
            rows = [steps[k] for k in range(base, base + len(steps)) if k in steps]
            self._steps = False
            if rows and len(rows) == len(steps):
                try:  # ragged (groups of different widths): a ValueError
                    columns = tuple(np.array([getattr(s, name) for s in rows], dtype)
                                    for name, dtype in (("rewards", np.float64),
                                                        ("terminated", bool),
                                                        ("truncated", bool)))
                except ValueError:
                    columns = ()
                if columns and len({c.shape for c in columns}) == 1 and columns[0].ndim == 2:
                    self._steps = columns  # type: ignore[assignment]
        return self._steps or None

    def uniform_specs(self) -> bool:
        """Every group step's action, and every observation, of one space (the spaces
        need not be compared lane by lane)."""
        if self._uniform is None:
            s = self.session
            self._uniform = (len({a.spec for a in s.actions.values()}) <= 1 and len(
                {o.spec for o in (*s.observations.values(), *s.resets)}) <= 1)
        return self._uniform

    def space(self, spec: bytes) -> ev.SpaceSpec:
        """A space's SpaceSpec, parsed once (the episodes of every session share it: read,
        never changed)."""
        parsed = _SPACES.get(spec)
        if parsed is None:
            if len(_SPACES) >= _KEPT_SPACES:
                _SPACES.clear()
            parsed = _SPACES[spec] = ev.SpaceSpec()
            parsed.ParseFromString(spec)
        return parsed

    def space_bytes(self, obs: bytes, act: bytes) -> tuple[bytes, bytes]:
        """`space(obs)` and `space(act)` serialized as `Episode.space_bytes` makes them,
        once per session."""
        key = (obs, act)
        pair = self._space_bytes.get(key)
        if pair is None:
            pair = self._space_bytes[key] = (
                self.space(obs).SerializeToString(deterministic=True),
                self.space(act).SerializeToString(deterministic=True))
        return pair

    def whole(self, kind: str) -> np.ndarray | None:
        """Every group step's values of `kind` ("obs" or "act") as one (G, lanes, *shape)
        array, for a space of one array leaf whose every group slab of `kind` in the
        session is whole: the session's slabs joined and read once. None: read value by
        value (the per-value path names a bad slab)."""
        if kind not in self._stacked:
            self._stacked[kind] = self._stack(
                self.session.observations if kind == "obs" else self.session.actions)
        return self._stacked[kind]

    def stacked(self, kind: str, groups: Any, lane: int) -> np.ndarray | None:
        """One lane's values of `groups` (group steps, not resets) as one (T, *shape)
        array, for a space of one array leaf whose every group slab of `kind` ("obs" or
        "act") in the session is whole: the session's slabs are joined and read once, and
        each episode is one indexing (no value per step). None: read value by value (the
        per-value path names a bad slab)."""
        whole = self.whole(kind)
        if whole is None or not len(groups) or lane >= whole.shape[1]:
            return None
        return whole[np.asarray(groups, dtype=np.intp) - self.session.base, lane]

    def _stack(self, items: dict[int, Any]) -> np.ndarray | None:
        if not items:
            return None
        base = self.session.base
        first = items[base] if base in items else next(iter(items.values()))
        n, spec = len(first.records), first.spec
        if len(items) != max(items) + 1 - base or any(
                v.spec != spec or v.leaves is None or len(v.leaves) != 1
                or len(v.records) != n for v in items.values()):
            return None
        leaves = self._decoder(spec).leaves
        if len(leaves) != 1 or leaves[0].kind == "text" or leaves[0].path:
            return None
        leaf = leaves[0]
        width = int(np.prod(leaf.shape, dtype=np.int64)) * leaf.dtype.itemsize * n
        slabs = [items[k].leaves[0] for k in range(base, base + len(items))]
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

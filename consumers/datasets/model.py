"""The joiner's data: what has been read of an episode, a session's flags, a whole episode.

Plain dataclasses; the joiner's small state is kept as JSON with the manifest (state.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from rlmesh_stream.consumers.datasets.groups import GroupSession
from rlmesh_stream.consumers.runtime.records import TP as TP  # re-exported for the joiners
from rlmesh_stream.schemas.contract import events as ev

Key = tuple[str, str]  # (session_id, episode_record_id)
Unit = tuple[str, ...]  # ("e", session, record): an episode; ("s", session): a vector session


@dataclass
class StepRow:
    reward: float
    terminated: bool
    truncated: bool
    infos: dict[str, Any] | None


@dataclass
class Steps:
    """A released episode's T steps as columns (no object per step): what the writers
    turn into Arrow columns and Minari's buffers as they are."""

    rewards: np.ndarray  # float64 (T,)
    terminated: np.ndarray  # bool (T,)
    truncated: np.ndarray  # bool (T,)
    infos: list[dict[str, Any] | None] | None = None  # None: no step carried infos

    def __len__(self) -> int:
        return len(self.rewards)

    @classmethod
    def of_rows(cls, rows: list[StepRow]) -> Steps:
        """A single-lane episode's step rows as columns."""
        infos: list[dict[str, Any] | None] | None = [r.infos for r in rows]
        if rows and all(i is None for i in infos or ()):
            infos = None
        return cls(np.fromiter((r.reward for r in rows), np.float64, len(rows)),
                   np.fromiter((r.terminated for r in rows), bool, len(rows)),
                   np.fromiter((r.truncated for r in rows), bool, len(rows)), infos)

    def total_reward(self) -> float:
        """The rewards summed in step order (as a Python loop adds them: row for row the
        figure the episode rows always held)."""
        return float(sum(self.rewards.tolist()))


@dataclass
class PendingEpisode:
    """What has been read of one episode so far (in memory; re-read after a restart)."""

    session_id: str
    record_id: str
    route: dict[str, Any] | None = None
    started: dict[str, Any] | None = None
    completed: dict[str, Any] | None = None
    observations: dict[int, list[bytes]] = field(default_factory=dict)
    actions: dict[int, list[bytes]] = field(default_factory=dict)
    steps: dict[int, StepRow] = field(default_factory=dict)
    obs_spec: bytes | None = None
    act_spec: bytes | None = None
    problem: str | None = None  # a reason this episode can never be released
    reset_infos: dict[str, Any] | None = None  # the reset observation's, env spec taken out
    env_spec: str | None = None  # the producer's `EnvSpec` JSON (events.ENV_SPEC_INFO)
    # the previous episode's NEXT_STEP roll observation (leaves, None when the producer
    # omitted them; space): this episode's reset observation once its start says it began
    # from a roll (`rolled_into`)
    roll_reset: tuple[list[bytes] | None, bytes] | None = None
    # the highest step of an observation, action and step read (kept when its values are
    # dropped): a second observation at `obs_high` is its NEXT_STEP roll's, and an episode
    # that cannot be released is decided once it was read to its end (`read_out`)
    obs_high: int = -1
    act_high: int = -1
    step_high: int = -1
    # a vector-env session's episode: the lane whose group events first named it (its
    # place among the lane's episodes when its `episode_started` is missing)
    lane: int | None = None

    def read_out(self) -> bool:
        """Started and completed, and its T steps, T actions and terminal observation read
        (held or not): nothing of it is to come but its roll's records."""
        if self.started is None or self.completed is None:
            return False
        steps = int(self.completed["step_count"])
        return (self.obs_high >= steps and self.act_high >= steps - 1
                and self.step_high >= steps - 1)

    def rolled_into(self) -> bool:
        """Its start says it began from a NEXT_STEP roll (auto-reset, no trial ordinal)."""
        s = self.started
        return s is not None and s["trial_index"] is None and bool(s["started_from_auto_reset"])

    def holds_only_a_roll(self) -> bool:
        """Made by a roll observation alone: the episode after a session's last one, which
        never began (a NEXT_STEP lane rolls once more after its last episode)."""
        return (self.roll_reset is not None and self.started is None and self.completed is None
                and not self.steps and not self.actions and not self.observations)

    def note_spec(self, which: str, raw: bytes) -> None:
        """A space read (serialised): the first kept, another one a problem."""
        old = getattr(self, which)
        if old is None:
            setattr(self, which, raw)
        elif old != raw and self.problem is None:
            self.problem = "space_changed"


class Decided(NamedTuple):
    """A single-lane episode released or skipped, as its session remembers it (None:
    unknown)."""

    roll_step: int | None  # the step of its roll's observation (its step count), read
    # after its terminal one: an episode is decided once that was read (or at the end)
    lane: int | None  # its env_index: a lane's episodes run one after another


@dataclass
class SessionState:
    ended: bool = False
    failed: bool = False
    caution: bool = False
    groups: GroupSession | None = None  # a vector-env session's group-step events
    totals: tuple[int, int] | None = None  # session_ended's (total_steps, total_episodes)
    exported: int = 0  # episodes of this session released so far
    # single-lane episodes released or skipped whose later records may still come (their
    # roll's, a lagging topic's), by record id (episodes.py)
    decided: dict[str, Decided] = field(default_factory=dict)
    # a vector-env session's episodes released early (vector.py `release_prefix`): those
    # a restart needs (record -> lane, episode index), how many in all, and the lane steps
    # of the groups dropped (`all_read` counts them)
    early: dict[str, tuple[int, int]] = field(default_factory=dict)
    early_done: int = 0
    dropped_real: int = 0
    # a vector-env session released whole once it ended: a group read after (its last
    # NEXT_STEP rolls, no step counted in its totals) makes no episode pending again
    released_whole: bool = False
    # a vector-env session whose groups read whole did not line up (a record lost or
    # dead-lettered): for good, so its groups are dropped as they are read whole and its
    # episodes not released yet are all skipped as `misaligned`
    misaligned: bool = False


@dataclass
class Episode:
    """A released episode, decoded: T+1 observations (T if `terminal_observation` is False)."""

    session_id: str
    record_id: str
    route: dict[str, Any]
    started: dict[str, Any]
    completed: dict[str, Any] | None
    # a list of values, or one (T(+1), *shape) array for a space of one array leaf
    observations: Any
    actions: Any
    steps: Steps
    obs_spec: ev.SpaceSpec
    act_spec: ev.SpaceSpec
    terminal_observation: bool
    abandoned: bool
    caution: bool
    reset_infos: dict[str, Any] | None = None  # None: the producer sent none
    env_spec: str | None = None  # the env as it ran (`EnvSpec` JSON), when the producer said
    # `obs_spec` and `act_spec` serialized (deterministic), when the releaser has them
    # already (a vector session's episodes share theirs); else made by `space_bytes`
    spaces: tuple[bytes, bytes] | None = field(default=None, repr=False)

    @property
    def length(self) -> int:
        return len(self.steps)

    def space_bytes(self) -> tuple[bytes, bytes]:
        """The observation and action SpaceSpecs' deterministic bytes (made once)."""
        if self.spaces is None:
            self.spaces = (self.obs_spec.SerializeToString(deterministic=True),
                           self.act_spec.SerializeToString(deterministic=True))
        return self.spaces


ROUTE_FIELDS = ("env_id", "env_component_id", "model_component_id", "lane")


def route_of(values: tuple[Any, ...]) -> dict[str, Any]:
    """A route as the datasets keep it, from its `ROUTE_FIELDS` values."""
    return dict(zip(ROUTE_FIELDS, values, strict=True))


@dataclass
class Filters:
    env_ids: tuple[str, ...] = ()
    models: tuple[str, ...] = ()
    include_abandoned: bool = False
    exclude_caution: bool = False

    def wants(self, route: dict[str, Any]) -> bool:
        return ((not self.env_ids or route["env_id"] in self.env_ids)
                and (not self.models or route["model_component_id"] in self.models))



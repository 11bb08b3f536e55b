"""What the export's joiner reads of each trajectory event, and where a read event belongs.

`ITEMS` names, per event type, the fields the joiner takes, in order: the runtime reads
them straight from the payloads (`TrajectoryBuilder.packed_items`, the generated reader
of `schemas.codec.avro_fastread`) into one tuple per record, with no event dataclass and no
object per lane; an event decoded whole (another writer schema) is packed the same way
(`PACKERS`). `unit_of` says which pending unit (an episode, or a vector session's group
steps) a record's values belong to: the resume point of a restart is kept per unit.
"""

from __future__ import annotations

from typing import Any

from rlmesh_stream.consumers.builders.projection import packer_of
from rlmesh_stream.consumers.datasets.model import ROUTE_FIELDS, Unit
from rlmesh_stream.schemas.codec.projection_items import Call, Item
from rlmesh_stream.schemas.contract import events as ev
from rlmesh_stream.schemas.contract.topics import EventType


def _space_bytes(spec: ev.SpaceSpec) -> bytes:
    """A space as the joiner keeps it (compared between an episode's events)."""
    return spec.SerializeToString(deterministic=True)


_ROUTE: tuple[Item, ...] = tuple(f"route.{name}" for name in ROUTE_FIELDS)

ITEMS: dict[EventType, tuple[Item, ...]] = {
    EventType.OBSERVATION_EMITTED: (
        "session_id", "episode_record_id", "episode_record_ids", "num_envs", "is_reset", "step",
        "observation", Call(_space_bytes, "observation_space"), "infos", *_ROUTE),
    EventType.ACTION_RECEIVED: (
        "session_id", "episode_record_id", "episode_record_ids", "step", "action",
        Call(_space_bytes, "action_space"), *_ROUTE),
    EventType.STEP_COMPLETED: (
        "session_id", "episode_record_id", "step", "rewards", "terminated", "truncated",
        "autoreset_roll", "infos", *_ROUTE),
    EventType.EPISODE_STARTED: (
        "session_id", "episode_record_id", "episode_id", "episode_index", "env_index", "seed",
        "trial_index", "started_from_auto_reset", *_ROUTE),
    EventType.EPISODE_COMPLETED: (
        "session_id", "episode_record_id", "episode_id", "step_count", "cumulative_reward",
        "terminated", "truncated", "success", "seed", "episode_index", "env_index",
        "trial_index", "duration_ms", *_ROUTE),
    EventType.SESSION_ENDED: ("session_id", "total_steps", "total_episodes"),
    EventType.SESSION_FAILED: ("session_id",),
    EventType.RELAY_ADVISORY: ("session_id", "advisory.severity"),
}
"""What the joiner reads of each trajectory event, in this order: the runtime reads these
straight from the payloads (`TrajectoryBuilder.packed_items`), with no event dataclass and
no object per lane; the session id first (the key is checked against it)."""

PACKERS = {et: packer_of(items) for et, items in ITEMS.items()}


# how an event type's values name their pending unit (`unit_of`)
EPISODE_UNIT, STEP_UNIT, GROUP_UNIT, NO_UNIT = 1, 2, 3, 0
UNIT_KINDS: dict[EventType, int] = {
    EventType.EPISODE_STARTED: EPISODE_UNIT, EventType.EPISODE_COMPLETED: EPISODE_UNIT,
    EventType.STEP_COMPLETED: STEP_UNIT,
    EventType.OBSERVATION_EMITTED: GROUP_UNIT, EventType.ACTION_RECEIVED: GROUP_UNIT,
}


def unit_of(kind: int, v: tuple[Any, ...]) -> Unit | None:
    """The pending unit an event belongs to (None: session-level, kept in the state), from
    its `ITEMS` and its type's `UNIT_KINDS`: the session id and episode record id first, a
    vector session's group events told by their lanes."""
    if kind == EPISODE_UNIT:
        return ("e", v[0], v[1])
    if kind == STEP_UNIT:
        return ("s", v[0]) if len(v[3]) > 1 else ("e", v[0], v[1])
    if kind == GROUP_UNIT:
        return ("s", v[0]) if len(v[2]) > 1 else ("e", v[0], v[1])
    return None

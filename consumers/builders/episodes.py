"""Episodes: one row per (session_id, episode_record_id), whatever order events arrive in.

`episode_started` and `episode_completed` each fill their half of the row;
status ranks completed > abandoned > running. An episode is abandoned when its
session ended or failed without it completing: the builder keeps its own
`episode_session_ends` and, after each batch, marks the still-running episodes
of ended sessions that the batch touched. That covers both orders: a session
end read after its episodes, and episodes read after their session's end.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, ClassVar, cast

from rlmesh_stream.consumers.builders.base import Builder, PartialRow, Reduced, session_bucket
from rlmesh_stream.consumers.builders.projection import (
    TIMESTAMP,
    Call,
    Const,
    Projection,
    Projections,
    Source,
)
from rlmesh_stream.consumers.runtime.records import Record, meta_json, route_columns
from rlmesh_stream.consumers.table_model import Table
from rlmesh_stream.consumers.tables import EPISODE_SESSION_ENDS, EPISODES, STEPS
from rlmesh_stream.schemas.contract.topics import EventType

if TYPE_CHECKING:  # the event classes load with the decoders, not at start-up
    from rlmesh_stream.schemas.contract import events as ev

ABANDON_SQL = """
UPDATE episodes SET status = 'abandoned'
WHERE status = 'running'
  AND session_id IN (SELECT session_id FROM episode_session_ends)
  AND session_id IN (SELECT session_id FROM {stage:episodes}
                     UNION SELECT session_id FROM {stage:episode_session_ends})
"""


# the columns both episode events fill, from the fields of the same names (route flattened)
_EPISODE: dict[str, Source] = {
    **{c: c for c in ("session_id", "episode_record_id", "episode_id", "episode_index",
                      "env_index", "seed", "trial_index")},
    **{c: f"route.{c}" for c in ("env_id", "env_component_id", "model_component_id", "lane")},
}


class EpisodesBuilder(Builder):
    name = "episodes"
    event_types: ClassVar[frozenset[EventType]] = frozenset({
        EventType.EPISODE_STARTED, EventType.EPISODE_COMPLETED,
        EventType.SESSION_ENDED, EventType.SESSION_FAILED,
    })
    tables: ClassVar[tuple[Table, ...]] = (EPISODES, EPISODE_SESSION_ENDS)
    after_sql = (ABANDON_SQL,)

    def lock_keys(self, reduced: Reduced) -> list[str]:
        """The buckets of the batch's sessions (`session_bucket`): the abandon rule reads a
        session's episodes and its end, which two processes may write at once (the range
        assignment keeps a session's partitions of all topics in one process, but a
        zombie's last checkpoint, a member paused past its session timeout, may still
        commit beside the new owner's; and a session's records may sit in partitions of
        different members: topics of different partition counts, a foreign producer's
        partitioner, wrongly keyed records)."""
        sessions = {key[0] for table in (EPISODES, EPISODE_SESSION_ENDS)
                    for key in reduced.rows.get(table.name, {})}
        return [f"episodes:{b}" for b in sorted({session_bucket(sid) for sid in sessions})]

    projections: ClassVar[Projections] = {
        EventType.EPISODE_STARTED: Projection(EPISODES, {
            **_EPISODE, "started_from_auto_reset": "started_from_auto_reset",
            "status": Const("running"), "started_at": TIMESTAMP}),
        EventType.EPISODE_COMPLETED: Projection(EPISODES, {
            **_EPISODE, "status": Const("completed"),
            **{c: c for c in ("step_count", "cumulative_reward", "terminated", "truncated",
                              "success", "duration_ms", "predict_ms", "step_ms")},
            "final_info": Call(meta_json, "final_info"), "completed_at": TIMESTAMP}),
        EventType.SESSION_ENDED: Projection(EPISODE_SESSION_ENDS, {
            "session_id": "session_id", "ended_at": TIMESTAMP, "status": Const("ended"),
            "total_episodes": "total_episodes"}),
        EventType.SESSION_FAILED: Projection(EPISODE_SESSION_ENDS, {
            "session_id": "session_id", "ended_at": TIMESTAMP, "status": Const("failed")}),
    }


class EpisodesWithStepsBuilder(EpisodesBuilder):
    """Episodes plus the optional `steps` table: one row per lane of each group step.

    A group step is identified by its `step_completed` record (a session's records
    are all in one partition), because the event's `step` is the primary lane's
    episode step: it repeats within a session, and is 0 when the primary lane has no
    episode. The event names only the primary slot's episode.
    """

    event_types: ClassVar[frozenset[EventType]] = EpisodesBuilder.event_types | {
        EventType.STEP_COMPLETED,
    }
    tables: ClassVar[tuple[Table, ...]] = (*EpisodesBuilder.tables, STEPS)

    def rows(self, record: Record) -> Iterator[PartialRow]:
        if record.event_type is EventType.STEP_COMPLETED and record.event is not None:
            e = cast("ev.StepCompletedEvent", record.event)
            route = route_columns(e.route)
            for slot, reward in enumerate(e.rewards):
                yield STEPS, {
                    "session_id": e.session_id, "step_offset": record.offset, "slot": slot,
                    "step": e.step, **route,
                    "episode_record_id": (e.episode_record_id or None) if slot == 0 else None,
                    "reward": reward, "terminated": _at(e.terminated, slot),
                    "truncated": _at(e.truncated, slot),
                    "autoreset_roll": _at(e.autoreset_roll, slot),
                    "predict_ms": e.predict_ms, "step_ms": e.step_ms,
                    "completed_at": record.timestamp,
                }
        else:
            yield from super().rows(record)


def _at(values: list[bool], i: int) -> bool | None:
    return values[i] if i < len(values) else None

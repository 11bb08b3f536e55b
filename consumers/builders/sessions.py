"""Sessions: one row per session_id with its route, lifecycle times and how it ended."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, ClassVar, cast

from rlmesh_stream.consumers.builders.base import Builder, PartialRow
from rlmesh_stream.consumers.runtime.records import Record, route_columns
from rlmesh_stream.consumers.table_model import Table
from rlmesh_stream.consumers.tables import SESSIONS
from rlmesh_stream.schemas.contract.topics import EventType

if TYPE_CHECKING:  # the event classes load with the decoders, not at start-up
    from rlmesh_stream.schemas.contract import events as ev


class SessionsBuilder(Builder):
    name = "sessions"
    event_types: ClassVar[frozenset[EventType]] = frozenset({
        EventType.ENV_CONNECTED, EventType.MODEL_CONNECTED, EventType.SESSION_STARTED,
        EventType.SESSION_ENDED, EventType.SESSION_FAILED,
    })
    tables: ClassVar[tuple[Table, ...]] = (SESSIONS,)

    def rows(self, record: Record) -> Iterator[PartialRow]:
        e, et, ts = record.event, record.event_type, record.timestamp
        if e is None:
            return
        row: dict[str, Any] = {"session_id": e.session_id, **route_columns(e.route),
                               "status": "running"}
        if et is EventType.ENV_CONNECTED:
            row["env_connected_at"] = ts
        elif et is EventType.MODEL_CONNECTED:
            row["model_connected_at"] = ts
        elif et is EventType.SESSION_STARTED:
            row["started_at"] = ts
        elif et is EventType.SESSION_ENDED:
            ended = cast("ev.SessionEndedEvent", e)
            row.update(status="ended", reason=ended.reason, total_steps=ended.total_steps,
                       total_episodes=ended.total_episodes, ended_at=ts)
        elif et is EventType.SESSION_FAILED:
            row.update(status="failed", reason=cast("ev.SessionFailedEvent", e).reason,
                       ended_at=ts)
        else:
            return
        yield SESSIONS, row

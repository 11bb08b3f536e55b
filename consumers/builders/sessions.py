"""Sessions: one row per session_id with its route, lifecycle times and how it ended."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

from rlmesh_stream.consumers.builders.base import Builder, PartialRow
from rlmesh_stream.consumers.records import Record, route_columns
from rlmesh_stream.consumers.tables import SESSIONS, Table
from rlmesh_stream.schemas.contract import events as ev
from rlmesh_stream.schemas.contract.topics import EventType


class SessionsBuilder(Builder):
    name = "sessions"
    event_types: ClassVar[frozenset[EventType]] = frozenset({
        EventType.ENV_CONNECTED, EventType.MODEL_CONNECTED, EventType.SESSION_STARTED,
        EventType.SESSION_ENDED, EventType.SESSION_FAILED,
    })
    tables: ClassVar[tuple[Table, ...]] = (SESSIONS,)

    def rows(self, record: Record) -> Iterator[PartialRow]:
        e = record.event
        if e is None:
            return
        ts = record.timestamp
        row: dict[str, Any] = {"session_id": e.session_id, **route_columns(e.route),
                               "status": "running"}
        if isinstance(e, ev.EnvConnectedEvent):
            row["env_connected_at"] = ts
        elif isinstance(e, ev.ModelConnectedEvent):
            row["model_connected_at"] = ts
        elif isinstance(e, ev.SessionStartedEvent):
            row["started_at"] = ts
        elif isinstance(e, ev.SessionEndedEvent):
            row.update(status="ended", reason=e.reason, total_steps=e.total_steps,
                       total_episodes=e.total_episodes, ended_at=ts)
        elif isinstance(e, ev.SessionFailedEvent):
            row.update(status="failed", reason=e.reason, ended_at=ts)
        else:
            return
        yield SESSIONS, row

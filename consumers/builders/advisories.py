"""Advisories: one row per (session_id, leg, severity, message), counted."""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar

from rlmesh_stream.consumers.builders.base import Builder, PartialRow
from rlmesh_stream.consumers.records import Record, enum_text, route_columns
from rlmesh_stream.consumers.tables import ADVISORIES, Table
from rlmesh_stream.schemas.contract import events as ev
from rlmesh_stream.schemas.contract.topics import EventType


class AdvisoriesBuilder(Builder):
    name = "advisories"
    event_types: ClassVar[frozenset[EventType]] = frozenset({EventType.RELAY_ADVISORY})
    tables: ClassVar[tuple[Table, ...]] = (ADVISORIES,)

    def rows(self, record: Record) -> Iterator[PartialRow]:
        e = record.event
        if isinstance(e, ev.RelayAdvisoryEvent):
            yield ADVISORIES, {
                "session_id": e.session_id, "leg": enum_text(e.leg),
                "severity": enum_text(e.advisory.severity), "message": e.advisory.message,
                "count": 1, "first_seen": record.timestamp, "last_seen": record.timestamp,
                **route_columns(e.route),
            }

"""Advisories: one row per (session_id, leg, severity, message), counted."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, ClassVar, cast

from rlmesh_stream.consumers.builders.base import Builder, PartialRow
from rlmesh_stream.consumers.runtime.records import Record, enum_text, route_columns
from rlmesh_stream.consumers.table_model import Table
from rlmesh_stream.consumers.tables import ADVISORIES
from rlmesh_stream.schemas.contract.topics import EventType

if TYPE_CHECKING:  # the event classes load with the decoders, not at start-up
    from rlmesh_stream.schemas.contract import events as ev


class AdvisoriesBuilder(Builder):
    name = "advisories"
    event_types: ClassVar[frozenset[EventType]] = frozenset({EventType.RELAY_ADVISORY})
    tables: ClassVar[tuple[Table, ...]] = (ADVISORIES,)

    def rows(self, record: Record) -> Iterator[PartialRow]:
        if record.event_type is EventType.RELAY_ADVISORY and record.event is not None:
            e = cast("ev.RelayAdvisoryEvent", record.event)
            yield ADVISORIES, {
                "session_id": e.session_id, "leg": enum_text(e.leg),
                "severity": enum_text(e.advisory.severity), "message": e.advisory.message,
                "count": 1, "first_seen": record.timestamp, "last_seen": record.timestamp,
                **route_columns(e.route),
            }

"""The `sessions` and `advisories` views: one partial row per lifecycle or advisory event.

The sources are the builders' rows (`builders/sessions.py`, `builders/advisories.py`)
written as column -> field declarations; `tests/engines` checks the views equal the
builders' tables. Every rule is the tables' merge rule (`render.py`).
"""

from __future__ import annotations

from rlmesh_stream.consumers.builders.projection import TIMESTAMP, Const
from rlmesh_stream.consumers.flink.render import EnumText, FlinkView, Partial, Source, table_view
from rlmesh_stream.consumers.tables import ADVISORIES, SESSIONS
from rlmesh_stream.schemas.contract import events as ev
from rlmesh_stream.schemas.contract.topics import EventType

ROUTE: dict[str, Source] = {c: f"route.{c}" for c in
                            ("env_id", "env_component_id", "model_component_id", "lane")}
_COMMON: dict[str, Source] = {"session_id": "session_id", **ROUTE, "status": Const("running")}

SESSION_PARTIALS = (
    Partial(EventType.ENV_CONNECTED, {**_COMMON, "env_connected_at": TIMESTAMP}),
    Partial(EventType.MODEL_CONNECTED, {**_COMMON, "model_connected_at": TIMESTAMP}),
    Partial(EventType.SESSION_STARTED, {**_COMMON, "started_at": TIMESTAMP}),
    Partial(EventType.SESSION_ENDED, {
        **_COMMON, "status": Const("ended"), "reason": "reason", "total_steps": "total_steps",
        "total_episodes": "total_episodes", "ended_at": TIMESTAMP}),
    Partial(EventType.SESSION_FAILED, {
        **_COMMON, "status": Const("failed"), "reason": "reason", "ended_at": TIMESTAMP}),
)

ADVISORY_PARTIALS = (
    Partial(EventType.RELAY_ADVISORY, {
        "session_id": "session_id", "leg": EnumText("leg", ev.Leg),
        "severity": EnumText("advisory.severity", ev.AdvisorySeverity),
        "message": "advisory.message", "count": Const(1), "first_seen": TIMESTAMP,
        "last_seen": TIMESTAMP, **ROUTE}),
)


def sessions_view() -> FlinkView:
    return table_view(SESSIONS, SESSION_PARTIALS)


def advisories_view() -> FlinkView:
    return table_view(ADVISORIES, ADVISORY_PARTIALS)

"""The consumers' tables as Flink SQL views over the topic tables of `schemas sql`.

For a team that outgrows one consumer process: a view per consumer table, named as the
table it mirrors, computing the same rows in Flink, batch (bounded topic tables) or
streaming (an updating result; `sink.py` writes it into PostgreSQL). Each is generated
from the table's definition and merge rules in `consumers/tables.py` (`render.py`) and
the partial rows its builder reads from each event; each module owns one concern:
`episodes.py`, `sessions.py` (sessions, advisories), `telemetry.py`, `delivery.py`.
Where Flink cannot say what the builder says, the view's header says how it differs
(`FlinkView.differences`), and `tests/engines/test_flink_views.py` names it.
"""

from __future__ import annotations

from datetime import timedelta

from rlmesh_stream.consumers.builders.telemetry import DEFAULT_WINDOW
from rlmesh_stream.consumers.flink import delivery, episodes, sessions, telemetry
from rlmesh_stream.consumers.flink.render import FlinkView

VIEW_NAMES = ("episodes", "sessions", "advisories", "telemetry_rollups", "telemetry_sessions",
              "delivery_producers")


def flink_views(window: timedelta = DEFAULT_WINDOW) -> dict[str, FlinkView]:
    """Every view by name; `window` is the telemetry builder's rollup window."""
    views = (episodes.episodes_view(), sessions.sessions_view(), sessions.advisories_view(),
             telemetry.rollups_view(window), telemetry.sessions_view(),
             delivery.producers_view())
    return {v.name: v for v in views}


def view_files(window: timedelta = DEFAULT_WINDOW) -> dict[str, str]:
    """`<view>_view.sql` -> its `CREATE TEMPORARY VIEW` (after the topics' tables)."""
    return {f"{name}_view.sql": view.create_sql()
            for name, view in flink_views(window).items()}


__all__ = ["VIEW_NAMES", "FlinkView", "flink_views", "view_files"]

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
from rlmesh_stream.consumers.flink.sink import insert_sql, jdbc_sink_sql, postgres_table_sql

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


def sink_files(jdbc_url: str, window: timedelta = DEFAULT_WINDOW) -> dict[str, str]:
    """A streaming job writing every view into PostgreSQL (`sink.py`): the tables to create
    in PostgreSQL first, and the Flink sink tables with one statement set of INSERTs. No
    credentials: add 'username' and 'password' to each sink's WITH clause."""
    views = flink_views(window).values()
    inserts = "".join(f"  {insert_sql(v)};\n" for v in views)
    flink = "".join(f"{jdbc_sink_sql(v, jdbc_url)};\n\n" for v in views)
    return {
        "postgres_tables.sql": "".join(f"{postgres_table_sql(v)};\n" for v in views).rstrip(),
        "sinks.sql": ("-- after the topic tables and the views; run in streaming mode\n"
                      f"{flink}EXECUTE STATEMENT SET\nBEGIN\n{inserts}END;"),
    }


__all__ = ["VIEW_NAMES", "FlinkView", "flink_views", "sink_files", "view_files"]

"""Sinking a streaming view into PostgreSQL: Flink's JDBC connector, upserting by the key.

A view over unbounded topic tables is an updating result (a row changes as its key's
records arrive), so it needs a sink that upserts: Flink's JDBC connector
(`org.apache.flink:flink-connector-jdbc-core` and `-postgres` 4.0.0-2.0, plus the
PostgreSQL driver; `infra fetch --flink` fetches them) writes each change as
`INSERT ... ON CONFLICT (key) DO UPDATE` when the sink table declares the view's key.
The PostgreSQL table is the consumers' own definition of it (`table_model.create_table_sql`),
less the columns Flink cannot carry, so a report reads it as it reads the consumers'.

Timestamps: the connector has no TIMESTAMP_LTZ, so a TIMESTAMPTZ column travels as a
TIMESTAMP in Flink's session time zone (`table.local-time-zone`), which the PostgreSQL
driver reads in the JVM's zone: the same instant as long as the session zone is left at
its default, the JVM's.
"""

from __future__ import annotations

from rlmesh_stream.consumers.flink.render import FlinkView, flink_type, literal
from rlmesh_stream.consumers.table_model import Column, Dialect, Table, create_table_sql
from rlmesh_stream.schemas.engines.flink import quote

SINK_PREFIX = "sink_"
_WALL_TIME = "TIMESTAMP(3)"  # a TIMESTAMPTZ column in the sink (see the module doc)


def postgres_table_sql(view: FlinkView) -> str:
    """The PostgreSQL table the view is written into (run it in PostgreSQL first)."""
    return create_table_sql(Table(view.name, view.columns, view.primary_key),
                            Dialect.POSTGRES)


def jdbc_sink_sql(view: FlinkView, jdbc_url: str, username: str = "",
                  password: str = "") -> str:
    """Flink's `CREATE TEMPORARY TABLE sink_<view>`: the PostgreSQL table, upserted by key.
    The connector takes a username and a password together, or neither."""
    if bool(username) != bool(password):
        raise ValueError("Flink's JDBC connector takes a username and a password together")
    columns = ",\n  ".join(f"{quote(c.name)} {_sink_type(c)}" for c in view.columns)
    keys = ", ".join(quote(k) for k in view.primary_key)
    props = {"connector": "jdbc", "url": jdbc_url, "table-name": view.name}
    if username:
        props["username"] = username
    if password:
        props["password"] = password
    with_ = ",\n  ".join(f"{literal(k)} = {literal(v)}" for k, v in props.items())
    return (f"CREATE TEMPORARY TABLE {quote(SINK_PREFIX + view.name)} (\n  {columns},\n"
            f"  PRIMARY KEY ({keys}) NOT ENFORCED\n) WITH (\n  {with_}\n)")


def _sink_type(column: Column) -> str | None:
    return _WALL_TIME if column.type == "TIMESTAMPTZ" else flink_type(column)


def insert_sql(view: FlinkView) -> str:
    """The streaming job's statement: every change of the view into its sink table."""
    names = ", ".join(
        f"CAST({quote(c.name)} AS {_WALL_TIME}) AS {quote(c.name)}"
        if c.type == "TIMESTAMPTZ" else quote(c.name) for c in view.columns)
    return (f"INSERT INTO {quote(SINK_PREFIX + view.name)} SELECT {names} "
            f"FROM {quote(view.name)}")

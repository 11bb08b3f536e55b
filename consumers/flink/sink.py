"""Sinking a streaming view into PostgreSQL: Flink's JDBC connector, upserting by the key.

A view over unbounded topic tables is an updating result (a row changes as its key's
records arrive), so it needs a sink that upserts: Flink's JDBC connector
(`org.apache.flink:flink-connector-jdbc-core` and `-postgres` 4.0.0-2.0, plus the
PostgreSQL driver; `infra fetch --flink` fetches them) writes each change as
`INSERT ... ON CONFLICT (key) DO UPDATE` when the sink table declares the view's key.
The PostgreSQL table is the consumers' own definition of it (`tables.create_table_sql`),
less the columns Flink cannot carry, so a report reads it as it reads the consumers'.
"""

from __future__ import annotations

from rlmesh_stream.consumers.flink.render import FlinkView, flink_type, literal
from rlmesh_stream.consumers.tables import Dialect, Table, create_table_sql
from rlmesh_stream.schemas.engines.flink import quote

SINK_PREFIX = "sink_"


def postgres_table_sql(view: FlinkView) -> str:
    """The PostgreSQL table the view is written into (run it in PostgreSQL first)."""
    return create_table_sql(Table(view.name, view.columns, view.primary_key),
                            Dialect.POSTGRES)


def jdbc_sink_sql(view: FlinkView, jdbc_url: str, username: str = "",
                  password: str = "") -> str:
    """Flink's `CREATE TEMPORARY TABLE sink_<view>`: the PostgreSQL table, upserted by key."""
    columns = ",\n  ".join(f"{quote(c.name)} {flink_type(c)}" for c in view.columns)
    keys = ", ".join(quote(k) for k in view.primary_key)
    props = {"connector": "jdbc", "url": jdbc_url, "table-name": view.name}
    if username:
        props["username"] = username
    if password:
        props["password"] = password
    with_ = ",\n  ".join(f"{literal(k)} = {literal(v)}" for k, v in props.items())
    return (f"CREATE TEMPORARY TABLE {quote(SINK_PREFIX + view.name)} (\n  {columns},\n"
            f"  PRIMARY KEY ({keys}) NOT ENFORCED\n) WITH (\n  {with_}\n)")


def insert_sql(view: FlinkView) -> str:
    """The streaming job's statement: every change of the view into its sink table."""
    names = ", ".join(quote(c.name) for c in view.columns)
    return (f"INSERT INTO {quote(SINK_PREFIX + view.name)} SELECT {names} "
            f"FROM {quote(view.name)}")

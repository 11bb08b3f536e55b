"""The join on a PostgreSQL store when DuckDB's `postgres` extension is not installed.

DuckDB reads PostgreSQL through its `postgres` extension, fetched from DuckDB's
extension repository; a machine that cannot reach it (or a policy against run-time
downloads) still deserves the join. So the episodes table is copied out of
PostgreSQL with one streamed `COPY ... TO STDOUT` (CSV, typed by the table's own
column types) into the in-memory DuckDB as `store.episodes`; the join then runs
there exactly as on any store; and a joined table is written back with
`COPY ... FROM STDIN` into a table created, in the same transaction, from the joined
columns' types. The copy is a snapshot: episodes consumed after it are not in it.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import duckdb
import psycopg

from rlmesh_stream.consumers.analysis.sql import q, sql_str
from rlmesh_stream.consumers.sinks.url import connect_postgres
from rlmesh_stream.consumers.tables import EPISODES

_CHUNK = 1 << 20
# PostgreSQL type (information_schema.columns.data_type) -> DuckDB type; others: VARCHAR.
_TO_DUCKDB = {
    "text": "VARCHAR", "character varying": "VARCHAR", "character": "VARCHAR",
    "bigint": "BIGINT", "integer": "INTEGER", "smallint": "SMALLINT",
    "double precision": "DOUBLE", "real": "FLOAT", "numeric": "DOUBLE",
    "boolean": "BOOLEAN", "date": "DATE", "uuid": "VARCHAR",
    "timestamp with time zone": "TIMESTAMPTZ", "timestamp without time zone": "TIMESTAMP",
    "json": "JSON", "jsonb": "JSON",
}
# DuckDB type (DESCRIBE) -> PostgreSQL type; others: text.
_TO_POSTGRES = {
    "VARCHAR": "text", "BIGINT": "bigint", "INTEGER": "integer", "SMALLINT": "smallint",
    "TINYINT": "smallint", "UBIGINT": "numeric", "UINTEGER": "bigint", "HUGEINT": "numeric",
    "DOUBLE": "double precision", "FLOAT": "real", "BOOLEAN": "boolean", "DATE": "date",
    "TIMESTAMP WITH TIME ZONE": "timestamptz", "TIMESTAMP": "timestamp", "JSON": "jsonb",
}
# Both sides write CSV the same way: NULL is an empty field, an empty string is "".
_CSV = "FORMAT csv, HEADER false"


def _pg_connect(url: str) -> psycopg.Connection[Any]:
    conn = connect_postgres(url)  # unreachable: SinkError
    conn.execute("SET TIME ZONE 'UTC'")  # CSV instants in UTC, whatever the server's zone
    return conn


def attach_episodes(con: duckdb.DuckDBPyConnection, url: str) -> None:
    """Attach an in-memory `store` holding a snapshot of the PostgreSQL episodes table."""
    con.execute("ATTACH ':memory:' AS store")
    with _pg_connect(url) as pg:
        columns = pg.execute(
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND table_name = %s "
            "ORDER BY ordinal_position", [EPISODES.name]).fetchall()
        if not columns:
            return  # run_join says the store has no episodes table
        types = {name: _TO_DUCKDB.get(kind, "VARCHAR") for name, kind in columns}
        con.execute(f"CREATE TABLE store.{EPISODES.name} ("
                    + ", ".join(f"{q(n)} {t}" for n, t in types.items()) + ")")
        with tempfile.TemporaryDirectory(prefix="rlmesh-join-") as tmp:
            path = Path(tmp) / "episodes.csv"
            select = ", ".join(q(n) for n in types)
            with open(path, "wb") as out, pg.cursor().copy(
                    f"COPY (SELECT {select} FROM {EPISODES.name}) TO STDOUT ({_CSV})") as copy:
                for block in copy:
                    out.write(block)
            spec = ", ".join(f"'{sql_str(n)}': '{t}'" for n, t in types.items())
            con.execute(f"INSERT INTO store.{EPISODES.name} "
                        f"SELECT * FROM read_csv(?, header = false, auto_detect = false, "
                        f"quote = '\"', escape = '\"', "
                        f"allow_quoted_nulls = false, columns = {{{spec}}})", [str(path)])


def write_back(con: duckdb.DuckDBPyConnection, url: str, name: str) -> None:
    """Replace PostgreSQL table `name` with DuckDB's temp table `joined`, in one transaction."""
    described = con.execute("DESCRIBE joined").fetchall()
    columns = ", ".join(f"{q(row[0])} {_TO_POSTGRES.get(str(row[1]), 'text')}"
                        for row in described)
    with tempfile.TemporaryDirectory(prefix="rlmesh-join-") as tmp:
        path = Path(tmp) / "joined.csv"
        con.execute(f"COPY joined TO '{sql_str(str(path))}' ({_CSV})")
        with _pg_connect(url) as pg, pg.transaction():
            pg.execute(f"DROP TABLE IF EXISTS {q(name)}")
            pg.execute(f"CREATE TABLE {q(name)} ({columns})")
            with open(path, "rb") as src, pg.cursor().copy(
                    f"COPY {q(name)} FROM STDIN ({_CSV})") as copy:
                while block := src.read(_CHUNK):
                    copy.write(block)

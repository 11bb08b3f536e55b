"""The in-memory DuckDB every step of the join runs in, with the store attached as
`store`, and the two one-value queries the steps ask it."""

from __future__ import annotations

from typing import Any

import duckdb

from rlmesh_stream.consumers.analysis.sql import sql_str
from rlmesh_stream.consumers.sinks.url import SinkError, SinkURL, as_sink_url, attach_duckdb


def connect(sink: SinkURL | str, *, writable: bool = False) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB with the store attached as `store` (SinkError if it cannot be).

    DuckDB stores are attached directly (read-only unless a table is to be
    written). PostgreSQL stores go through DuckDB's `postgres` extension when it
    is installed (it is never fetched at run time); without it, the episodes are
    copied out of PostgreSQL into the in-memory DuckDB (`join_postgres`).
    """
    target = as_sink_url(sink)
    con = duckdb.connect()
    try:
        con.execute("SET TimeZone = 'UTC'")
        if target.path is not None:
            attach_duckdb(con, target.path, "store", read_only=not writable)
        elif _has_postgres_extension(con):
            options = "TYPE postgres" + ("" if writable else ", READ_ONLY")
            try:
                con.execute(f"ATTACH '{sql_str(target.url)}' AS store ({options})")
            except duckdb.Error as exc:
                reason = str(exc).splitlines()[0]
                raise SinkError(f"cannot attach {target.shown}: {reason}") from exc
        else:
            from rlmesh_stream.consumers.analysis.join_postgres import attach_episodes

            attach_episodes(con, target.url)
    except BaseException:
        con.close()
        raise
    return con


def _has_postgres_extension(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether DuckDB's `postgres` extension is installed (never fetched at run time)."""
    try:
        con.execute("SET autoinstall_known_extensions = false")
        con.execute("LOAD postgres")
    except duckdb.Error:
        return False
    return True


def describe(con: duckdb.DuckDBPyConnection, relation: str) -> dict[str, str]:
    return {row[0]: row[1] for row in con.execute(f"DESCRIBE SELECT * FROM {relation}").fetchall()}


def scalar(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any] | None = None) -> Any:
    row = con.execute(sql, params or []).fetchone()
    return row[0] if row else None

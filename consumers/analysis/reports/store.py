"""Read access to a table store addressed by URL, for the reports.

The sinks themselves (writing, DDL) belong to the consumers' sink classes;
reports only need to run a few read-only queries and get rows back, on either
backend. This module is that one narrow seam, so the report code stays
backend-agnostic: it writes portable SQL and never touches a driver.

URLs follow the consumers' rules (`consumers.sinks.url`, which also opens the
files and connections): `duckdb:///abs/path.duckdb`, `duckdb://relative.duckdb`
or `postgresql://user@host/db`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from rlmesh_stream.consumers.sinks.url import (
    SinkError,
    SinkURL,
    as_sink_url,
    connect_duckdb,
    connect_postgres,
)
from rlmesh_stream.consumers.table_model import Table, View


class StoreError(SinkError):
    """The store cannot be opened or lacks what a report needs; the message says which."""


@dataclass(frozen=True)
class Rows:
    """A query result: column names and rows in order."""

    columns: list[str]
    rows: list[tuple[Any, ...]]

    def dicts(self) -> list[dict[str, Any]]:
        return [dict(zip(self.columns, row, strict=True)) for row in self.rows]


class Store(Protocol):
    """What a report needs from a store: queries, and whether a table exists."""

    def query(self, sql: str, params: Sequence[Any] = ()) -> Rows: ...

    def has_table(self, name: str) -> bool: ...


class _SQLStore:
    """What both stores share: `query` is each one's own, the rest is the same SQL."""

    _con: Any

    def query(self, sql: str, params: Sequence[Any] = ()) -> Rows:
        raise NotImplementedError

    def has_table(self, name: str) -> bool:
        rows = self.query(
            "SELECT 1 FROM information_schema.tables WHERE table_name = %s", [name]
        )
        return bool(rows.rows)

    def close(self) -> None:
        self._con.close()


class DuckDBStore(_SQLStore):
    """A DuckDB file opened read-only, so a report never takes the writer's lock."""

    def __init__(self, path: Path) -> None:
        self._con = connect_duckdb(path, read_only=True)  # SinkError names what is wrong
        # Reports show instants in UTC, whatever the machine's zone.
        self._con.execute("SET TimeZone = 'UTC'")

    def query(self, sql: str, params: Sequence[Any] = ()) -> Rows:
        import duckdb

        try:
            cur = self._con.execute(sql.replace("%s", "?"), list(params))
            columns = [d[0] for d in cur.description or []]
            return Rows(columns, [tuple(r) for r in cur.fetchall()])
        except duckdb.Error as exc:
            raise StoreError(_shape_message(exc)) from exc


class PostgresStore(_SQLStore):
    """A PostgreSQL database, queried in a read-only transaction."""

    def __init__(self, url: str) -> None:
        self._con = connect_postgres(url, autocommit=True)  # SinkError names what is wrong
        self._con.execute("SET TIME ZONE 'UTC'")
        self._con.execute("SET default_transaction_read_only = on")

    def query(self, sql: str, params: Sequence[Any] = ()) -> Rows:
        import psycopg

        try:
            cur = self._con.execute(sql, list(params))  # type: ignore[arg-type]
            columns = [d.name for d in cur.description or []]
            return Rows(columns, [tuple(r) for r in cur.fetchall()])
        except psycopg.Error as exc:
            raise StoreError(_shape_message(exc)) from exc



def _shape_message(exc: Exception) -> str:
    """A failed report query: in a store consume writes, the tables have another shape."""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return (f"the store's tables are not the shape `rlmesh-stream consume` writes ({first}): "
            "point --sink at a store the consumers built, or run `rlmesh-stream consume` "
            "into it")


@contextmanager
def open_store(url: SinkURL | str) -> Iterator[DuckDBStore | PostgresStore]:
    """Open the store a sink URL names, read-only, and close it afterwards."""
    target = as_sink_url(url)
    store: DuckDBStore | PostgresStore
    store = (DuckDBStore(target.path) if target.path is not None
             else PostgresStore(target.url))
    try:
        yield store
    finally:
        store.close()


def require_table(store: Store, relation: Table | View,
                  producer: str = "`rlmesh-stream consume`") -> None:
    """Fail with a clear message when a report's source table (or view) is missing."""
    if not store.has_table(relation.name):
        raise StoreError(f"the store has no `{relation.name}` table yet: it is built by "
                         f"{producer}")

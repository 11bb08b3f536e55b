"""Read access to a table store addressed by URL, for the reports.

The sinks themselves (writing, DDL) belong to the consumers' sink classes;
reports only need to run a few read-only queries and get rows back, on either
backend. This module is that one narrow seam, so the report code stays
backend-agnostic: it writes portable SQL and never touches a driver.

URLs: `duckdb:///abs/path.duckdb`, `duckdb://relative.duckdb`, a bare path
(taken as DuckDB), or `postgresql://user@host/db`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlparse

from rlmesh_stream.schemas.access import redact_url


class StoreError(Exception):
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


def duckdb_path(url: str) -> Path:
    """The file a DuckDB URL names (`duckdb:///abs`, `duckdb://rel`, or a bare path)."""
    if url.startswith("duckdb://"):
        rest = url[len("duckdb://"):]
        if not rest:
            raise StoreError(f"{url!r}: a DuckDB URL needs a file path")
        return Path(rest)
    if "://" in url:
        raise StoreError(f"{url!r} is not a DuckDB URL")
    return Path(url)


def duckdb_open_message(path: Path, exc: Exception, *, writing: bool) -> str:
    """Why a DuckDB file cannot be opened, with the hint that fits the cause."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if "lock" in text.lower():  # another process holds the file for writing
        hint = ("DuckDB allows one writing process: stop the consumer" +
                (", or leave out --table (a join without it only reads)." if writing
                 else ", or read a copy of the file."))
        return f"cannot open {path}: {text}. {hint}"
    return f"cannot open {path} as a DuckDB store: {text}"


def is_postgres(url: str) -> bool:
    return urlparse(url).scheme in ("postgresql", "postgres")


class DuckDBStore:
    """A DuckDB file opened read-only, so a report never takes the writer's lock."""

    def __init__(self, path: Path) -> None:
        import duckdb

        if not path.exists():
            raise StoreError(f"no DuckDB store at {path} (has `rlmesh-stream consume` run?)")
        try:
            self._con = duckdb.connect(str(path), read_only=True)
        except duckdb.Error as exc:
            raise StoreError(duckdb_open_message(path, exc, writing=False)) from exc
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

    def has_table(self, name: str) -> bool:
        rows = self.query(
            "SELECT 1 FROM information_schema.tables WHERE table_name = %s", [name]
        )
        return bool(rows.rows)

    def close(self) -> None:
        self._con.close()


class PostgresStore:
    """A PostgreSQL database, queried in a read-only transaction."""

    def __init__(self, url: str) -> None:
        import psycopg

        try:
            self._con = psycopg.connect(url, autocommit=True)
        except psycopg.Error as exc:
            raise StoreError(f"cannot connect to {redact_url(url)}: {exc}") from exc
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

    def has_table(self, name: str) -> bool:
        rows = self.query(
            "SELECT 1 FROM information_schema.tables WHERE table_name = %s", [name]
        )
        return bool(rows.rows)

    def close(self) -> None:
        self._con.close()


def _shape_message(exc: Exception) -> str:
    """A failed report query: in a store consume writes, the tables have another shape."""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return (f"the store's tables are not the shape `rlmesh-stream consume` writes ({first}): "
            "point --sink at a store the consumers built, or run `rlmesh-stream consume` "
            "into it")


@contextmanager
def open_store(url: str) -> Iterator[DuckDBStore | PostgresStore]:
    """Open the store a sink URL names, read-only, and close it afterwards."""
    store: DuckDBStore | PostgresStore
    store = PostgresStore(url) if is_postgres(url) else DuckDBStore(duckdb_path(url))
    try:
        yield store
    finally:
        store.close()


def require_table(store: Store, name: str, producer: str) -> None:
    """Fail with a clear message when a report's source table is missing."""
    if not store.has_table(name):
        raise StoreError(f"the store has no `{name}` table yet: it is built by {producer}")

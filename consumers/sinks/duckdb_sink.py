"""The embedded default: a DuckDB file, one writing process at a time.

Rows are staged as Arrow tables registered on the connection, then merged
with one `INSERT ... SELECT ... ON CONFLICT DO UPDATE` per table: no round
trip per row.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa

from rlmesh_stream.consumers.sinks.base import Sink
from rlmesh_stream.consumers.sinks.url import connect_duckdb
from rlmesh_stream.consumers.tables import Dialect, Table, upsert_sql

_ARROW: dict[str, pa.DataType] = {
    "TEXT": pa.string(), "JSON": pa.string(), "BIGINT": pa.int64(), "INTEGER": pa.int32(),
    "DOUBLE": pa.float64(), "DECIMAL": pa.decimal128(38, 9), "BOOLEAN": pa.bool_(),
    "TIMESTAMPTZ": pa.timestamp("us", tz="UTC"),
}


def arrow_schema(table: Table) -> pa.Schema:
    return pa.schema([(c.name, _ARROW[c.type]) for c in table.columns])


def to_arrow(table: Table, rows: list[dict[str, Any]]) -> pa.Table:
    columns = {c.name: [r[c.name] for r in rows] for c in table.columns}
    return pa.Table.from_pydict(columns, schema=arrow_schema(table))


class DuckDBSink(Sink):
    dialect = Dialect.DUCKDB
    name_match_sql = "lower(table_name) = lower(%s)"

    def __init__(self, path: Path) -> None:
        self.path = path
        self.con = connect_duckdb(path)  # a file that cannot be a store: SinkError
        self._registered: list[str] = []

    def close(self) -> None:
        self.con.close()

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        self.con.begin()
        try:
            yield
        except BaseException:
            self.con.rollback()
            raise
        else:
            self.con.commit()
        finally:
            for name in self._registered:
                self.con.unregister(name)
            self._registered = []

    def _lock_keys(self, keys: list[str]) -> None:
        """Nothing to do: one writing process, and its transactions run one at a time."""

    def _lock_for_migration(self) -> None:
        """Nothing to do: a DuckDB file has one writing process."""

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        return self.con.execute(sql.replace("%s", "?"), params).fetchall()

    def _execute(self, sql: str, params: tuple[Any, ...] = ()) -> None:
        self.con.execute(sql.replace("%s", "?"), params)

    def _execute_returning(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        return self.con.execute(sql.replace("%s", "?"), params).fetchall()

    def _columns_of(self, table: str) -> set[str]:
        rows = self.con.execute(
            "SELECT column_name FROM information_schema.columns "
            f"WHERE {self.name_match_sql.replace('%s', '?')}", (table,)).fetchall()
        return {r[0] for r in rows}

    def _stage(self, rows: dict[Table, list[dict[str, Any]]]) -> dict[Table, str]:
        stages: dict[Table, str] = {}
        self._registered = []
        for table, table_rows in rows.items():
            name = f"stage_{table.name}"
            self.con.register(name, to_arrow(table, table_rows))
            self._registered.append(name)
            stages[table] = name
        return stages

    def _upsert(self, table: Table, stage: str) -> None:
        self.con.execute(upsert_sql(table, stage))

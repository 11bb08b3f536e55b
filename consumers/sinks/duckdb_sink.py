"""The embedded default: a DuckDB file, one writing process at a time.

Rows are staged as Arrow tables registered on the connection, then merged
with one `INSERT ... SELECT ... ON CONFLICT DO UPDATE` per table: no round
trip per row.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlmesh_stream.consumers.sinks.base import Sink
from rlmesh_stream.consumers.sinks.url import connect_duckdb
from rlmesh_stream.consumers.tables import Dialect, Table, upsert_sql

if TYPE_CHECKING:
    import pyarrow as pa

_ARROW_TYPES = {"TEXT": "string", "JSON": "string", "BIGINT": "int64", "INTEGER": "int32",
                "DOUBLE": "float64", "BOOLEAN": "bool_"}


def _arrow_type(pa: Any, sql_type: str) -> Any:
    if sql_type == "DECIMAL":
        return pa.decimal128(38, 9)
    if sql_type == "TIMESTAMPTZ":
        return pa.timestamp("us", tz="UTC")
    return getattr(pa, _ARROW_TYPES[sql_type])()


def arrow_schema(table: Table) -> pa.Schema:
    """The Arrow schema rows of `table` are staged with (pyarrow imported when first used:
    it and numpy cost a process ~0.2 s of CPU, see `DuckDBSink.prepare`)."""
    import pyarrow as pa

    schema = table.__dict__.get("_arrow_schema")
    if schema is None:
        schema = pa.schema([(c.name, _arrow_type(pa, c.type)) for c in table.columns])
        object.__setattr__(table, "_arrow_schema", schema)  # a cache on the frozen table
    return schema


def to_arrow(table: Table, rows: list[Any]) -> pa.Table:
    """Rows as dicts, or packed tuples (every column, in order), as one Arrow table."""
    import pyarrow as pa

    schema = arrow_schema(table)
    if rows and type(rows[0]) is tuple:  # packed: transposed in C, timestamps in ms
        columns = zip(*rows, strict=True)
        stamp = pa.timestamp("ms", tz="UTC")
        return pa.Table.from_arrays(
            [pa.array(col, stamp if pa.types.is_timestamp(f.type) else f.type)
             for col, f in zip(columns, schema, strict=True)], names=schema.names)
    by_name = {c.name: [r[c.name] for r in rows] for c in table.columns}
    return pa.Table.from_pydict(by_name, schema=schema)


class DuckDBSink(Sink):
    dialect = Dialect.DUCKDB
    name_match_sql = "lower(table_name) = lower(%s)"

    def __init__(self, path: Path) -> None:
        self.path = path
        self.con = connect_duckdb(path)  # a file that cannot be a store: SinkError
        # one thread: a checkpoint's statements are small, and DuckDB's worker threads
        # doubled their CPU (upsert, abandon rule, commit) for no shorter wall time
        # (docs/benchmarks.md, "Consumers")
        self.con.execute("SET threads = 1")
        self._registered: list[str] = []

    def close(self) -> None:
        self.con.close()

    def prepare(self) -> None:
        """Import what staging needs (pyarrow) ahead of the first batch."""
        import pyarrow  # noqa: F401

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

    def _stage(self, rows: dict[Table, list[Any]]) -> dict[Table, str]:
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

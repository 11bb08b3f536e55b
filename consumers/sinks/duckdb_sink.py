"""The embedded default: a DuckDB file, one writing process at a time.

Rows are staged as Arrow tables registered on the connection, then merged
per table by one `MERGE INTO` (`merge_into_sql`: the same rows as `INSERT ...
ON CONFLICT DO UPDATE`, which DuckDB runs as a costlier MERGE); a batch's
offsets are fenced in one UPDATE and one INSERT. No round trip per row or
per partition.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlmesh_stream.consumers.sinks.base import (
    WRITER,
    OffsetUpdate,
    TableSink,
    offset_conflict,
)
from rlmesh_stream.consumers.sinks.url import connect_duckdb
from rlmesh_stream.consumers.table_model import Dialect, Table, merge_into_sql
from rlmesh_stream.consumers.tables import CONSUMER_OFFSETS

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


def packed_type(table: Table) -> pa.StructType:
    """The Arrow struct of one packed row of `table` (its timestamps in ms, as packed)."""
    import pyarrow as pa

    struct = table.__dict__.get("_arrow_packed")
    if struct is None:
        stamp = pa.timestamp("ms", tz="UTC")
        struct = pa.struct([(f.name, stamp if pa.types.is_timestamp(f.type) else f.type)
                            for f in arrow_schema(table)])
        object.__setattr__(table, "_arrow_packed", struct)  # a cache on the frozen table
    return struct


def to_arrow(table: Table, rows: list[Any]) -> pa.Table:
    """Rows as dicts, or packed tuples (every column, in order), as one Arrow table.

    Packed rows are converted as one struct array, row by row in C++: each tuple is
    read once, where transposing them (`zip(*rows)`) and converting column by column
    cost about twice as much (1.1 to 1.8 us a row against ~0.6 as one struct array).
    """
    import pyarrow as pa

    if rows and type(rows[0]) is tuple:
        rows_array = pa.array(rows, type=packed_type(table))
        return pa.Table.from_batches([pa.RecordBatch.from_struct_array(rows_array)])
    by_name = {c.name: [r[c.name] for r in rows] for c in table.columns}
    return pa.Table.from_pydict(by_name, schema=arrow_schema(table))


class DuckDBSink(TableSink):
    dialect = Dialect.DUCKDB
    shared_writers = False  # a DuckDB file has one writing process
    name_match_sql = "lower(table_name) = lower(%s)"
    names_fold_case = True

    def __init__(self, path: Path) -> None:
        self.path = path
        self.con = connect_duckdb(path)  # a file that cannot be a store: SinkError
        # one thread: a checkpoint's statements are small, and DuckDB's worker threads
        # doubled their CPU (upsert, abandon rule, commit: 7.0 against 3.7 us an event)
        # for no shorter wall time
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
        self.con.execute(merge_into_sql(table, stage))

    def _fence_all(self, updates: list[OffsetUpdate], group_id: str, now: datetime) -> None:
        """The batch's offsets in one UPDATE (stored rows) and one INSERT (new rows), each
        returning the rows it wrote: one missing is a conflict, and the exception rolls
        the whole transaction back, as `TableSink._fence` per offset does."""
        if len({(u.builder, u.topic, u.partition) for u in updates}) < len(updates):
            super()._fence_all(updates, group_id, now)  # a partition twice: one at a time
            return
        moved = [u for u in updates if u.expected is not None]
        fresh = [u for u in updates if u.expected is None]
        done: set[tuple[str, str, int]] = set()
        if moved:
            done.update(self._fence_rows(_FENCE_UPDATE, moved, group_id, now))
        if fresh:
            done.update(self._fence_rows(_FENCE_INSERT, fresh, group_id, now))
        for u in updates:
            if (u.builder, u.topic, u.partition) not in done:
                raise offset_conflict(u)

    def _fence_rows(self, sql: str, updates: list[OffsetUpdate], group_id: str,
                    now: datetime) -> list[tuple[str, str, int]]:
        values = ", ".join(["(?, ?, ?, ?, ?, ?, ?, ?)"] * len(updates))
        params = [p for u in updates for p in (u.builder, u.topic, u.partition, u.expected,
                                              u.next_offset, group_id, now, WRITER)]
        rows = self.con.execute(sql.format(values=values), params).fetchall()
        return [(str(b), str(t), int(p)) for b, t, p in rows]


# the fence (`TableSink._fence`) of several offsets in one statement; `{values}` is one
# (builder, topic, partition_id, expected, next_offset, group_id, updated_at, written_by)
# row per offset
_FENCE_ROWS = ("(VALUES {values}) AS v(builder, topic, partition_id, expected, next_offset, "
               "group_id, updated_at, written_by)")
_FENCE_UPDATE = (
    f"UPDATE {CONSUMER_OFFSETS.name} AS o SET next_offset = v.next_offset, "
    "group_id = v.group_id, updated_at = v.updated_at, written_by = v.written_by "
    f"FROM {_FENCE_ROWS} WHERE o.builder = v.builder AND o.topic = v.topic "
    "AND o.partition_id = v.partition_id AND o.next_offset = v.expected "
    "RETURNING o.builder, o.topic, o.partition_id")
_FENCE_INSERT = (
    f"INSERT INTO {CONSUMER_OFFSETS.name} (builder, topic, partition_id, next_offset, "
    "group_id, updated_at, written_by) SELECT builder, topic, partition_id, next_offset, "
    f"group_id, updated_at, written_by FROM {_FENCE_ROWS} "
    "ON CONFLICT DO NOTHING RETURNING builder, topic, partition_id")

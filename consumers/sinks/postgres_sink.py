"""PostgreSQL: one store shared by several consumer processes.

Rows are COPYed into per-connection temporary staging tables (emptied at
commit) and merged with one `INSERT ... SELECT ... ORDER BY key ON CONFLICT DO
UPDATE` per table. The key order makes concurrent writers of shared rows (the
telemetry rollups) lock them in the same order, which rules out deadlocks
between them; a deadlock or serialization failure that still happens is
retried by the runtime like any other transient failure.

A connection lost since its last use (the backend terminated, the server restarted or
failed over) is made again at the next transaction or read; while the server is still
away that is a `SinkUnavailable`, which the checkpoint writer retries with back-off
(its temporary staging tables, gone with the old connection, are made again).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from rlmesh_stream.consumers.runtime.records import timestamp_of
from rlmesh_stream.consumers.sinks.base import TableSink
from rlmesh_stream.consumers.sinks.url import SinkError, SinkUnavailable, connect_postgres
from rlmesh_stream.consumers.table_model import Dialect, Table, column_defs, upsert_sql

_MIGRATION_LOCK = 0x726C6D657368  # "rlmesh": pg_advisory_xact_lock key for migrations

class PostgresSink(TableSink):
    dialect = Dialect.POSTGRES

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.conn = connect_postgres(dsn, autocommit=True)  # unreachable: SinkError
        self._staged: set[str] = set()

    def close(self) -> None:
        self.conn.close()

    def _connection(self) -> Any:
        """The connection, made again if the last one was lost (backend terminated, server
        restarted): it connected before, so a refusal now is the server being away."""
        if self.conn.closed:
            try:
                self.conn = connect_postgres(self.dsn, autocommit=True)
            except SinkError as exc:
                raise SinkUnavailable(f"lost the connection to PostgreSQL and cannot "
                                      f"reconnect yet: {exc}") from exc
            self._staged.clear()  # temporary staging tables die with their connection
        return self.conn

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        conn = self._connection()
        try:
            with conn.transaction():
                yield
        except BaseException:
            self._staged.clear()  # staging tables created in a rolled-back transaction are gone
            raise

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        import psycopg

        try:
            return self._read(sql, params)
        except psycopg.OperationalError:
            if not self.conn.closed:
                raise
        # the connection was lost since its last use: a read runs again on a new one
        return self._read(sql, params)

    def _read(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        with self._connection().cursor() as cur:
            cur.execute(sql, params)
            return cur.fetchall() if cur.description else []

    def _execute(self, sql: str, params: tuple[Any, ...] = ()) -> None:
        self.conn.execute(sql, params)  # type: ignore[arg-type]

    def _execute_returning(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        return self.query(sql, params)

    def _lock_keys(self, keys: list[str]) -> None:
        # in the sorted subquery's order: one acquisition order for all (no deadlocks). The
        # builders' keys are buckets (`builders.base.LOCK_BUCKETS`), few enough for the lock
        # table whatever the batch's size
        self.conn.execute(
            "SELECT pg_advisory_xact_lock(k) FROM (SELECT DISTINCT hashtextextended(key, 0) "
            "AS k FROM unnest(%s::text[]) AS key ORDER BY k) AS keys", (keys,))

    def _lock_for_migration(self) -> None:
        self.conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))

    def _columns_of(self, table: str) -> set[str]:
        rows = self.query(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND table_name = %s", (table,))
        return {r[0] for r in rows}

    def _stage(self, rows: dict[Table, list[Any]]) -> dict[Table, str]:
        stages: dict[Table, str] = {}
        for table, table_rows in rows.items():
            name = f"stage_{table.name}"
            if name not in self._staged:
                shape = (column_defs(table, self.dialect) if table.stage_only
                         else f"LIKE {table.name}")
                self.conn.execute(
                    f"CREATE TEMP TABLE IF NOT EXISTS {name} "  # type: ignore[arg-type]
                    f"({shape}) ON COMMIT DELETE ROWS")
                self._staged.add(name)
            if table_rows:
                cols = table.column_names
                with self.conn.cursor() as cur, cur.copy(
                    f"COPY {name} ({', '.join(cols)}) FROM STDIN"
                ) as copy:
                    stamps = [i for i, c in enumerate(table.columns) if c.type == "TIMESTAMPTZ"]
                    for row in table_rows:  # a dict, or a packed tuple (every column)
                        if type(row) is tuple:  # timestamps in ms
                            values = list(row)
                            for i in stamps:
                                if values[i] is not None:
                                    values[i] = timestamp_of(values[i])
                            copy.write_row(values)
                        else:
                            copy.write_row([row[c] for c in cols])
            stages[table] = name
        return stages

    def _upsert(self, table: Table, stage: str) -> None:
        key = ", ".join(table.primary_key)
        source = f"(SELECT * FROM {stage} ORDER BY {key}) AS s"
        self.conn.execute(upsert_sql(table, source))  # type: ignore[arg-type]

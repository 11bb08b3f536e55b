"""The sink contract (`Sink`: every call the consumer runtime makes on a sink) and the
table sinks' shared logic (`TableSink`: DuckDB and PostgreSQL).

Exactly once, by construction: the runtime resumes from `load_offsets`, and
`apply` writes rows and offsets atomically, so a crash before the commit
leaves neither and a crash after leaves both. Offsets are also *fenced*: each
update names the offset the writer expects to be stored, and the transaction
is rolled back (`OffsetConflict`) when another process moved it meanwhile (a
zombie after a rebalance), so two processes never apply the same records.

A sink that keeps state between checkpoints (the dataset export's joiner) is told when
reading goes back (`rewound`), when its partitions go away (`revoked`) and when an
offline run has read everything (`at_end`); a table sink keeps nothing, so those hooks are
no-ops here, documented once, and the runtime calls them on every sink alike.
"""

from __future__ import annotations

import abc
import os
import socket
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from rlmesh_stream.consumers.runtime.records import TP
from rlmesh_stream.consumers.sinks.url import SinkError
from rlmesh_stream.consumers.table_model import (
    Dialect,
    Table,
    View,
    add_column_sql,
    create_table_sql,
    create_view_sql,
)
from rlmesh_stream.consumers.tables import (
    CONSUMER_OFFSETS,
    DEAD_LETTERS,
    DELIVERY_PRODUCERS,
    DELIVERY_SEQUENCES,
    LEGACY_DELIVERY_COLUMN,
    LEGACY_DELIVERY_RANGES_SQL,
    LEGACY_DELIVERY_SCRATCH,
    TABLES,
    VIEWS,
)
from rlmesh_stream.schemas.errors import RlmeshStreamError

WRITER = f"{socket.gethostname()}:{os.getpid()}"


# Columns of an older shape of a table that its migration converts (not a foreign table).
_LEGACY_COLUMNS: dict[str, frozenset[str]] = {
    DELIVERY_SEQUENCES.name: frozenset({LEGACY_DELIVERY_COLUMN, "copies", "first_topic"}),
}


class _Catalog:
    """A store's relations (table_type) and their columns (data_type), looked up by our
    names as the store resolves them (case-folded where identifiers are)."""

    def __init__(self, fold: bool, columns: list[tuple[Any, ...]],
                 kinds: list[tuple[Any, ...]]) -> None:
        self._fold = fold
        self._columns: dict[str, dict[str, str]] = {}
        for table, column, data_type in columns:
            self._columns.setdefault(self._key(str(table)), {})[str(column)] = str(data_type)
        self._kinds = {self._key(str(name)): str(kind) for name, kind in kinds}

    def _key(self, name: str) -> str:
        return name.lower() if self._fold else name

    def columns(self, table: str) -> dict[str, str]:
        return self._columns.get(self._key(table), {})

    def kind(self, name: str) -> str | None:
        return self._kinds.get(self._key(name))


class ForeignTableError(SinkError):
    """The store holds a table or view of a consumers' name that the consumers did not make."""


class OffsetConflict(RlmeshStreamError, RuntimeError):
    """Another writer moved a stored offset: this batch must not be applied."""


@dataclass(frozen=True)
class OffsetUpdate:
    builder: str
    topic: str
    partition: int
    expected: int | None  # the stored next offset this batch starts from; None: no row yet
    next_offset: int


def offset_conflict(u: OffsetUpdate) -> OffsetConflict:
    """The error for an update whose fence found another stored offset (or a row)."""
    return OffsetConflict(
        f"{u.builder} {u.topic}[{u.partition}]: stored offset is no longer "
        f"{u.expected}; another consumer has applied these records")


@dataclass
class SinkBatch:
    """What one checkpoint writes: merged rows per table, post-statements, offsets."""

    # per table, its rows: dicts, or packed tuples (every column in order; see
    # builders/projection.py)
    rows: dict[Table, list[Any]] = field(default_factory=dict)
    after_sql: list[str] = field(default_factory=list)
    offsets: list[OffsetUpdate] = field(default_factory=list)
    group_id: str = ""
    # keys whose rows other processes may change concurrently in a way a statement
    # of this batch reads (episodes of a session vs its end): locked for the
    # transaction, in sorted order, so such transactions run one after the other; a
    # builder names at most LOCK_BUCKETS (buckets of such rows, `builders.base`)
    locks: list[str] = field(default_factory=list)
    # per builder, per partition: what tells re-delivered records apart, as of the batch's
    # offsets (`runtime/redelivery.py`), for a sink that keeps it with its own state (an
    # export's); a table sink gets `delivery_marks` rows instead
    seen: dict[str, dict[tuple[str, int], Any]] = field(default_factory=dict)

    def add_dead_letter(self, builder: str, topic: str, partition: int, offset: int,
                        error: str, dead_letter_topic: str | None) -> None:
        self.rows.setdefault(DEAD_LETTERS, []).append({
            "topic": topic, "partition_id": partition, "record_offset": offset,
            "builder": builder, "error": error, "seen_at": datetime.now(UTC),
            "dead_letter_topic": dead_letter_topic,
        })


class Sink(abc.ABC):
    """Every call the consumer runtime makes on a sink (`consumers.runtime`).

    Required: `load_offsets`, `apply`, `close`. The rest are hooks with a no-op default,
    for a sink that keeps state between checkpoints or needs a head start.
    """

    # several processes may write the store at once: the batch's lock keys are taken
    shared_writers = True
    # `apply` reads state the builders' `rows()` feed (the dataset exporter's joiner): the
    # runtime reduces a cut only once the checkpoint before it is written
    reads_builder_state = False

    @abc.abstractmethod
    def load_offsets(self, builder: str) -> dict[TP, int]:
        """The next offset to apply per partition for this builder, as stored."""

    @abc.abstractmethod
    def apply(self, batch: SinkBatch) -> None:
        """Write the batch and its offsets atomically; OffsetConflict leaves nothing."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release the store (the runtime's last call)."""

    def prepare(self) -> None:  # noqa: B027 - optional hook
        """Load what writing needs, ahead of the first batch (on the runtime's warm-up
        thread, while the group join is waited for). An ImportError or OSError here is
        only logged: the first `apply` meets it again and reports it. Nothing by default."""

    def rewound(self, partitions: list[TP]) -> None:  # noqa: B027 - optional hook
        """`partitions` are read again from the stored offsets (an assignment, a loss, a
        rewind): a sink that keeps state goes back to its committed state. Nothing by
        default (a table sink keeps nothing between checkpoints)."""

    def revoked(self, read: dict[TP, int] | None) -> None:  # noqa: B027 - optional hook
        """Whole-sessions reading only: every partition went away (an eager revocation or
        a loss); `read` is the next offset read per partition, everything below it
        committed (None: not all of it is). Nothing by default."""

    def at_end(self) -> None:  # noqa: B027 - optional hook
        """--until-end, everything read and checkpointed, while this process still holds
        its partitions: the sink's last decisions (OffsetConflict: fenced, the runtime
        reads again). Nothing by default."""

    def group_offsets(self) -> dict[TP, int] | None:
        """How far every member of the group has read each partition, as stored (a group
        whose members share one store); None: this sink cannot tell, and a member holding
        no partition waits for the group to settle instead."""
        return None


class TableSink(Sink):
    """The consumers' tables in a SQL store (DuckDB, PostgreSQL): migration, staged
    upserts, fenced offsets; the dialects fill in the abstract statements."""

    dialect: Dialect
    # how information_schema's table_name matches one of our names: DuckDB resolves
    # identifiers case-insensitively (a user's "Episodes" IS episodes), PostgreSQL does not
    name_match_sql = "table_name = %s"
    names_fold_case = False

    def migrate(self, tables: tuple[Table, ...] = TABLES,
                views: tuple[View, ...] = VIEWS) -> None:
        """Create missing tables and views, and add columns new to a definition.

        The store's catalog is read in two queries, not three per table: on a store that
        is up to date the migration is on a consume run's start-up (61 ms for three queries
        per table, 14 ms for two in all)."""
        with self._transaction():
            self._lock_for_migration()
            catalog = self._catalog()
            self._refuse_foreign(tables, views, catalog)  # before anything is created
            if DELIVERY_SEQUENCES in tables and self._migrate_delivery_ranges():
                catalog = self._catalog()
            for table in tables:
                present = catalog.columns(table.name)
                if not present:
                    self._execute(create_table_sql(table, self.dialect))
                    continue
                for column in table.columns:
                    if column.name not in present:
                        self._execute(add_column_sql(table, column, self.dialect))
                self._widen_columns(table, present)
            for view in views:
                self._execute(create_view_sql(view))

    def _catalog(self) -> _Catalog:
        """The current schema's relations and their columns, as the store names them."""
        columns = self._execute_returning(
            "SELECT table_name, column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = current_schema()", ())
        kinds = self._execute_returning(
            "SELECT table_name, table_type FROM information_schema.tables "
            "WHERE table_schema = current_schema()", ())
        return _Catalog(self.names_fold_case, columns, kinds)

    def _widen_columns(self, table: Table, present: dict[str, str]) -> None:
        """INTEGER columns of an older definition that are BIGINT now (Avro longs: `lane`,
        `env_index`) are widened in place; every value they hold fits."""
        for column in table.columns:
            if column.type == "BIGINT" and present.get(column.name, "").upper() == "INTEGER":
                self._execute(f"ALTER TABLE {table.name} ALTER COLUMN {column.name} "
                              "TYPE BIGINT")

    def _refuse_foreign(self, tables: tuple[Table, ...], views: tuple[View, ...],
                        catalog: _Catalog) -> None:
        """ForeignTableError for a relation of one of our names that is not ours.

        A table is ours when every column it has is one of its definition's (or of the
        older shape its migration converts) and it has the first key column: an older
        version of ours lacks only columns added since. Anything else is the user's own
        table, which a migration must neither alter nor write into.
        """
        for table in tables:
            present = set(catalog.columns(table.name))
            if not present:
                continue
            known = set(table.column_names) | _LEGACY_COLUMNS.get(table.name, frozenset())
            strange = sorted(present - known)
            if strange or table.primary_key[0] not in present:
                what = (f"columns {', '.join(strange)}" if strange
                        else f"no {table.primary_key[0]} column")
                raise ForeignTableError(
                    f"the store already has a table {table.name!r} that the consumers did "
                    f"not create ({what}); it is left untouched: rename it, or use "
                    "another --sink")
        for view in views:
            kind = catalog.kind(view.name)
            if kind is not None and kind.upper() != "VIEW":
                raise ForeignTableError(
                    f"the store already has a table {view.name!r} where the consumers keep "
                    "a view; it is left untouched: rename it, or use another --sink")

    def _migrate_delivery_ranges(self) -> bool:
        """A `delivery_sequences` of one row per sequence becomes its contiguous ranges
        (True when it did)."""
        if LEGACY_DELIVERY_COLUMN not in self._columns_of(DELIVERY_SEQUENCES.name):
            return False
        self._execute(LEGACY_DELIVERY_RANGES_SQL)
        self._execute(f"DROP VIEW IF EXISTS {DELIVERY_PRODUCERS.name}")
        self._execute(f"DROP TABLE {DELIVERY_SEQUENCES.name}")
        self._execute(create_table_sql(DELIVERY_SEQUENCES, self.dialect))
        names = ", ".join(DELIVERY_SEQUENCES.column_names)
        self._execute(f"INSERT INTO {DELIVERY_SEQUENCES.name} ({names}) "
                      f"SELECT {names} FROM {LEGACY_DELIVERY_SCRATCH}")
        self._execute(f"DROP TABLE {LEGACY_DELIVERY_SCRATCH}")
        return True

    def load_offsets(self, builder: str) -> dict[TP, int]:
        """The next offset to apply per partition for this builder, as stored."""
        rows = self.query(
            f"SELECT topic, partition_id, next_offset FROM {CONSUMER_OFFSETS.name} "
            "WHERE builder = %s", (builder,))
        return {(str(t), int(p)): int(o) for t, p, o in rows}

    def apply(self, batch: SinkBatch) -> None:
        """Write the batch and its offsets atomically; OffsetConflict leaves nothing."""
        with self._transaction():
            now = datetime.now(UTC)
            # first: fail fast, and lock offsets before rows
            self._fence_all(batch.offsets, batch.group_id, now)
            if batch.locks:
                self._lock_keys(sorted(set(batch.locks)))
            if not any(batch.rows.values()):
                # no rows: nothing staged (nor pyarrow imported, ~0.1 s of CPU for a run
                # over empty topics), and a statement on the stages has nothing to touch
                for sql in batch.after_sql:
                    if "{stage:" not in sql:
                        self._execute(sql)
                return
            stages = self._stage(batch.rows)
            for table, stage in stages.items():
                if batch.rows.get(table) and not table.stage_only:
                    self._upsert(table, stage)
            for sql in batch.after_sql:
                for t, stage in stages.items():
                    sql = sql.replace(f"{{stage:{t.name}}}", stage)
                self._execute(sql)

    def _fence_all(self, updates: list[OffsetUpdate], group_id: str, now: datetime) -> None:
        """Fence every offset of the batch (`_fence`, in the batch's order, which is the
        order PostgreSQL locks the rows in); a sink may do it in fewer statements."""
        for u in updates:
            self._fence(u, group_id, now)

    def _fence(self, u: OffsetUpdate, group_id: str, now: datetime) -> None:
        if u.expected is None:
            sql = (f"INSERT INTO {CONSUMER_OFFSETS.name} (builder, topic, partition_id, "
                   "next_offset, group_id, updated_at, written_by) "
                   "VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING RETURNING 1")
            params: tuple[Any, ...] = (u.builder, u.topic, u.partition, u.next_offset,
                                       group_id, now, WRITER)
        else:
            sql = (f"UPDATE {CONSUMER_OFFSETS.name} SET next_offset = %s, group_id = %s, "
                   "updated_at = %s, written_by = %s WHERE builder = %s AND topic = %s "
                   "AND partition_id = %s AND next_offset = %s RETURNING 1")
            params = (u.next_offset, group_id, now, WRITER, u.builder, u.topic, u.partition,
                      u.expected)
        if not self._execute_returning(sql, params):
            raise offset_conflict(u)

    # -- dialect-specific -------------------------------------------------------------

    @abc.abstractmethod
    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Run a read in its own transaction (placeholders are `%s`)."""

    @abc.abstractmethod
    def _transaction(self) -> Any: ...

    @abc.abstractmethod
    def _execute(self, sql: str, params: tuple[Any, ...] = ()) -> None: ...

    @abc.abstractmethod
    def _execute_returning(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        ...

    @abc.abstractmethod
    def _columns_of(self, table: str) -> set[str]: ...

    @abc.abstractmethod
    def _stage(self, rows: dict[Table, list[Any]]) -> dict[Table, str]:
        """Load the batch's rows into staging relations; return their names."""

    @abc.abstractmethod
    def _upsert(self, table: Table, stage: str) -> None: ...

    @abc.abstractmethod
    def _lock_keys(self, keys: list[str]) -> None:
        """Hold a transaction-scoped lock on each key, acquired in the given order."""

    @abc.abstractmethod
    def _lock_for_migration(self) -> None:
        """Serialise concurrent migrations (several processes starting at once)."""

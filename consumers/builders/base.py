"""A builder: which topics it reads, which tables it writes, and its reducer.

Builders are pure: `rows(record)` turns one record into partial rows (only
the columns that record knows; the rest None), and `reduce` pre-merges a
batch's partial rows per key with the tables' merge rules. A builder whose
every event type is a `Projection` (one row per record, see `projection.py`)
is *packed*: its rows are tuples in column order, read straight from the
payload when the runtime can (`Record.values`), and merged as tuples. All state lives in
the sink's tables, so a builder process can die at any instant and a restart
from the sink's offsets yields the same tables.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

from rlmesh_stream.consumers.builders.projection import Projections
from rlmesh_stream.consumers.runtime.records import Record, epoch_ms
from rlmesh_stream.consumers.table_model import Table, finish_row, merge_rows, tuple_merger
from rlmesh_stream.schemas.codec.projection_items import Item
from rlmesh_stream.schemas.contract.partitioning import partition_of, session_partition
from rlmesh_stream.schemas.contract.topics import EventType

PartialRow = tuple[Table, dict[str, Any]]

# A builder's lock keys (`lock_keys`, `SinkBatch.locks`) name buckets, not sessions: a
# backlog's batch holds thousands of sessions, more locks than PostgreSQL's lock table
# holds (max_locks_per_transaction x max_connections, 6 400 by default), so a batch takes
# at most LOCK_BUCKETS locks per builder. A session's bucket is the partition its id hashes
# to under the producer's partitioner on a topic of LOCK_BUCKETS partitions. Two batches
# touching one session take its one bucket, whatever partitions its records came from
# (a bucket is coarser than a session: always safe). Every writer of a sink must compute
# the same bucket or the locks exclude nothing, so the count is a constant of the code,
# not anything a member learns at run time (a topic's partition count can grow, members
# of one sink may read topics of different counts). It is a multiple of the usual
# partition counts (every divisor of 960: 1 to 6, 8, 10, 12, 15, 16, 20, 24, 30, 32, 40,
# 48, 60, 64, 80, 96, 120, ...): on a topic of P partitions, P dividing 960, a session's
# bucket modulo P is its partition, so members owning disjoint partitions take disjoint
# buckets and never wait on each other. Changing it changes the locking between writers:
# processes of two versions must not write one sink at once.
LOCK_BUCKETS = 960


class Builder:
    """Base class; subclasses set the class attributes and implement `rows`."""

    name: ClassVar[str]
    event_types: ClassVar[frozenset[EventType]]
    tables: ClassVar[tuple[Table, ...]]
    needs_decode: ClassVar[bool] = True
    # a re-delivered record (a producer id and sequence its partition held before) is
    # dropped before `rows` sees it (`runtime/redelivery.py`); the delivery checks, which
    # count duplicates, see every record
    drops_duplicates: ClassVar[bool] = True
    # every record it reads must be keyed by its event's session id (`record_key`): a
    # builder that holds a session's state per partition. A record keyed otherwise is
    # dead-lettered (`runtime.decoding.check_key`); such a builder is never packed
    checks_keys: bool = False
    # statements run after the batch's upserts, in the same transaction;
    # `{stage:<table>}` names the relation holding this batch's rows of <table>. One
    # that names a stage touches only rows its stages name: a batch with no rows skips it
    after_sql: ClassVar[tuple[str, ...]] = ()

    # per event type, its row as a projection of the event (see `projection.py`)
    projections: ClassVar[Projections] = {}

    def topics_of(self, prefix: str) -> list[str]:
        return sorted(et.topic(prefix) for et in self.event_types)

    @property
    def packed(self) -> bool:
        """Every event type is a projection: rows are packed tuples (`_reduce_packed`)."""
        return bool(self.event_types) and self.event_types <= self.projections.keys()

    def packed_items(self, event_type: EventType) -> tuple[Item, ...] | None:
        """What the runtime reads straight from a payload of `event_type` for this builder,
        into `Record.values` (one tuple, in this order), or None: whole events
        (`Record.event`). A packed builder's: its projection's columns. A builder that
        `checks_keys` names `session_id` first (the key is checked against it)."""
        if not self.packed:
            return None
        return self.projections[event_type].items

    def rows(self, record: Record) -> Iterator[PartialRow]:
        """The projection's row of the record's event (override for other builders)."""
        projection = self.projections.get(record.event_type)
        if projection is not None and record.event is not None:
            yield projection.table, projection.row(record.event, record.timestamp)

    def lock_keys(self, reduced: Reduced) -> list[str]:
        """Keys to lock while a batch is applied (see `SinkBatch.locks`), at most
        LOCK_BUCKETS; none by default."""
        return []


def session_bucket(session_id: str) -> int:
    """The lock bucket of a session (see LOCK_BUCKETS)."""
    return session_partition(session_id, LOCK_BUCKETS)


def key_bucket(key: str) -> int:
    """The lock bucket of any other key (a producer's id): its hash, LOCK_BUCKETS ways."""
    return partition_of(key.encode("utf-8"), LOCK_BUCKETS)


@dataclass
class Reduced:
    """A batch reduced to one merged row per key, per table."""

    rows: dict[str, dict[tuple[Any, ...], Any]] = field(default_factory=dict)  # dicts or tuples

    def add(self, table: Table, row: dict[str, Any]) -> None:
        by_key = self.rows.get(table.name)
        if by_key is None:
            by_key = self.rows[table.name] = {}
        key = tuple([row.get(k) for k in table.primary_key])
        old = by_key.get(key)
        if old is None:  # the first row of its key: every column, absent ones NULL
            full = dict.fromkeys(table.column_names)
            full.update(row)
            by_key[key] = finish_row(table, full)
        else:  # an absent column merges as NULL, as in the SQL upsert
            by_key[key] = merge_rows(table, old, row)

    def sorted_rows(self, table: Table) -> list[Any]:
        """Rows in key order, so concurrent writers lock rows in one order (no deadlocks),
        and DuckDB merges them about a tenth faster than in read order; dicts, or packed
        tuples for a packed builder's tables."""
        by_key = self.rows.get(table.name, {})
        keys = list(by_key)
        if any(None in k for k in keys):  # NULLs last, as (v is None, v) orders them
            keys.sort(key=_sort_key)
        else:  # no NULL in any key: the same order, without a key function
            keys.sort()
        return [by_key[k] for k in keys]


def _sort_key(key: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple((v is None, v) for v in key)


def reduce(builder: Builder, records: Iterable[Record], into: Reduced | None = None) -> Reduced:
    reduced = into if into is not None else Reduced()
    take = getattr(builder, "take", None)
    if take is not None:  # a builder that feeds state of its own, a batch at a time: no rows
        take(records)
        return reduced
    if builder.packed:
        _reduce_packed(builder.projections, records, reduced)
        return reduced
    for record in records:
        for table, row in builder.rows(record):
            reduced.add(table, row)
    return reduced


def _reduce_packed(projections: Projections, records: Iterable[Record],
                   reduced: Reduced) -> None:
    """Merge every record's packed row into `reduced` (`table_model.tuple_merger`), with what
    each event type needs looked up once: the per-record loop of a backlog."""
    plans: dict[EventType, tuple[Any, ...]] = {}
    last_type: EventType | None = None  # records come in runs of one event type: an
    for record in records:  # enum's hash is a Python call, looked up once per run
        values = record.values
        if values is None:
            if record.event is None:
                continue  # dead-lettered: no row
            values = projections[record.event_type].pack(record.event,
                                                         epoch_ms(record.timestamp))
        if record.event_type is not last_type:
            last_type = record.event_type
            plan = plans.get(last_type)
            if plan is None:
                projection = projections[last_type]
                table = projection.table
                plan = plans[last_type] = (
                    reduced.rows.setdefault(table.name, {}), projection.key_of,
                    tuple_merger(table))
            by_key, key_of, merge = plan
        key = key_of(values)
        old = by_key.get(key)
        by_key[key] = values if old is None else merge(old, values)

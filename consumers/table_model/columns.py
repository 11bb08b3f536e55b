"""The table model: columns, merge rule names (`Merge`), tables, views, types per dialect.

Why declarative: every table the consumers build is written by order-independent
upserts. Each column says how a new partial row merges into the stored one (`Merge`);
`merge.py` applies that rule in Python and in SQL, `ddl.py` renders the DDL and the
upserts, and `consumers/tables.py` holds the table definitions themselves.

Types are portable between DuckDB and PostgreSQL; JSON is `JSON` in DuckDB and `JSONB`
in PostgreSQL.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any


class Dialect(enum.Enum):
    DUCKDB = "duckdb"
    POSTGRES = "postgresql"


class Merge(enum.Enum):
    """How an incoming partial row's value merges into the stored value."""

    FIRST = "first"  # keep the stored value; fill it when still NULL
    LAST = "last"  # take the incoming value unless it is NULL
    SUM = "sum"  # add (counters; exact because every record is applied once)
    MIN = "min"  # smallest non-NULL
    MAX = "max"  # largest non-NULL
    RANK = "rank"  # the value with the higher rank in `Column.ranks` (a status)
    FOLLOWS = "follows"  # the value of the row whose `Column.follows` status ranks higher
    DERIVED = "derived"  # recomputed from other merged columns (`Column.derive`)


@dataclass(frozen=True)
class Column:
    name: str
    # TEXT, BIGINT, INTEGER, DOUBLE, DECIMAL, BOOLEAN, TIMESTAMPTZ, JSON. A column fed by an
    # event field takes the field's Avro type: a long is BIGINT (another producer may write
    # any long, whatever the Rust type behind it; an INTEGER column stalled the builder)
    type: str
    merge: Merge = Merge.FIRST
    nullable: bool = True
    ranks: tuple[str, ...] = ()  # for Merge.RANK: lowest precedence first
    follows: str = ""  # for Merge.FOLLOWS: the RANK column whose winner this value follows
    # for Merge.DERIVED: a Python function of the merged row and the SQL
    # expression of the same, over the merged values of other columns
    derive: Callable[[Mapping[str, Any]], Any] | None = None
    derive_sql: str = ""
    doc: str = ""


@dataclass(frozen=True)
class Table:
    name: str
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...]
    doc: str = ""
    # rows only staged for a builder's `after_sql` (as `{stage:<name>}`): the sinks create
    # no table for it and upsert nothing
    stage_only: bool = False
    # a statement names the key in ON CONFLICT (the offsets' fence, the delivery ranges'
    # merge), so every store keeps it as a PRIMARY KEY; otherwise DuckDB keeps no index
    # of it (see `create_table_sql`)
    conflict_target: bool = False
    column_by_name: dict[str, Column] = field(init=False, repr=False, compare=False)

    has_derived: bool = field(init=False, repr=False, compare=False)
    column_names: list[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "column_by_name", {c.name: c for c in self.columns})
        object.__setattr__(self, "column_names", [c.name for c in self.columns])
        object.__setattr__(self, "has_derived",
                           any(c.merge is Merge.DERIVED for c in self.columns))


    def key_of(self, row: Mapping[str, Any]) -> tuple[Any, ...]:
        return tuple(row[k] for k in self.primary_key)


@dataclass(frozen=True)
class View:
    name: str
    sql: str
    doc: str = ""


# DECIMAL is for sums that must not depend on the order they were added in (floating
# point addition is not associative; two processes adding to one rollup row would
# otherwise leave different last bits): values are rounded to 1e-9 once, then added exactly.
_TYPES: dict[Dialect, dict[str, str]] = {
    Dialect.DUCKDB: {"DOUBLE": "DOUBLE", "JSON": "JSON", "DECIMAL": "DECIMAL(38, 9)"},
    Dialect.POSTGRES: {"DOUBLE": "DOUBLE PRECISION", "JSON": "JSONB",
                       "DECIMAL": "NUMERIC(38, 9)"},
}


def sql_type(column: Column, dialect: Dialect) -> str:
    return _TYPES[dialect].get(column.type, column.type)

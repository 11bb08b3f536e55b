"""A consumer table as a Flink SQL query: partial rows per source event, merged per key.

Why: a table is written by order-independent upserts (`table_model.Merge`), so the whole
history of a key merges into one row whatever the order. Over a group of all of a key's
partial rows the same result is an aggregate per column, which Flink computes in a
batch (bounded) or updating (streaming) job alike:

- FIRST, LAST: `FIRST_VALUE`, `LAST_VALUE` (the same value when all partial rows agree,
  as a session's route does; otherwise the builder keeps the first/last it read and Flink
  the first/last it read: an order decided by arrival, named in the view's header by
  `merge_differences`);
- MIN, MAX: as named; SUM: `SUM`, and as the upsert does, NULL only for a key of one
  partial row whose value is NULL (`COALESCE(old, 0) + COALESCE(new, 0)` otherwise);
- RANK: the highest-ranked value (`Column.ranks`), NULL when none is ranked;
- FOLLOWS: the non-NULL value of the highest-ranked row that has one (the rank is put
  in front of the value's text, the maximum taken, the rank cut off again);
- DERIVED: the column's own `derive_sql` over the merged columns.

The partial rows come from `Partial`s: per source event type, which column takes
which field (`Source`: a dotted path, a constant, the record timestamp, an enum's text,
or a Flink expression), optionally one row per element of an array field (`unnest`)
and only the records a condition keeps (`where`). JSON columns (a MetaMap) have no
Flink type and are left out.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

from rlmesh_stream.consumers.builders.projection import TIMESTAMP, Call, Const
from rlmesh_stream.consumers.runtime.records import enum_text
from rlmesh_stream.consumers.table_model import Column, Merge, Table
from rlmesh_stream.schemas.codec.projection_items import Arg
from rlmesh_stream.schemas.contract.avro import named_types
from rlmesh_stream.schemas.contract.topics import EventType
from rlmesh_stream.schemas.engines.flink import quote, table_name, value_columns
from rlmesh_stream.schemas.engines.reader import reader_schema

FLINK_TYPES = {"TEXT": "STRING", "BIGINT": "BIGINT", "INTEGER": "INT", "DOUBLE": "DOUBLE",
               "BOOLEAN": "BOOLEAN", "TIMESTAMPTZ": "TIMESTAMP_LTZ(3)",
               "DECIMAL": "DECIMAL(38, 9)"}
RECORD_TIME = "`kafka_timestamp`"
ITEM = "item"  # the alias of an unnested array element
RECORD = "rec"  # the alias of the topic table: `snapshot.rows` alone would name a table


@dataclass(frozen=True)
class Sql:
    """A source that is a Flink expression over the partial's record (and `item`)."""

    text: str


@dataclass(frozen=True)
class EnumText:
    """The text the builders store for an enum field (`records.enum_text`: the Python
    enum's value), from the Avro symbol Flink reads (the member's name)."""

    path: str
    enum: type[enum.Enum]


Source: TypeAlias = str | Const | Arg | Call | Sql | EnumText
"""A dotted path (`route.env_id`, `item.source.op`), a constant, the record TIMESTAMP, an
enum's text, or a Flink expression; a `Call` (a Python conversion) has none."""


@dataclass(frozen=True)
class Partial:
    """The partial rows one event type contributes to a table."""

    event_type: EventType
    columns: Mapping[str, Source]
    unnest: str = ""  # an array field: one partial row per element, read as `item.<field>`
    where: str = ""  # a Flink condition: only the records it keeps


def flink_type(column: Column) -> str | None:
    """The Flink type of a table column; None for one Flink cannot carry (JSON)."""
    return FLINK_TYPES.get(column.type)


def view_columns(table: Table) -> list[Column]:
    """The columns a view of `table` has: every column with a Flink type."""
    return [c for c in table.columns if flink_type(c) is not None]


def left_out(table: Table) -> list[str]:
    return [c.name for c in table.columns if flink_type(c) is None]


def path_sql(path: str) -> str:
    """A dotted field path of the record (qualified by its alias) or of `item`."""
    parts = path.split(".")
    if parts[0] != ITEM:
        parts.insert(0, RECORD)
    return ".".join(quote(part) for part in parts)


def literal(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int | float):
        return repr(value)
    return "'" + str(value).replace("'", "''") + "'"


def source_sql(source: Source) -> str:
    """The Flink expression of a column's source."""
    if isinstance(source, str):
        return path_sql(source)
    if isinstance(source, Const):
        return literal(source.value)
    if source is TIMESTAMP:
        return RECORD_TIME
    if isinstance(source, Sql):
        return source.text
    if isinstance(source, EnumText):
        whens = " ".join(f"WHEN {literal(m.name)} THEN {literal(enum_text(m))}"
                         for m in source.enum)
        return f"CASE {path_sql(source.path)} {whens} END"
    raise ValueError(f"no Flink expression for the source {source!r}")


def _array_item_fields(event_type: EventType, path: str) -> list[str]:
    """The field names of the records an array field (a dotted path) holds."""
    schema = reader_schema(event_type).schema
    named = named_types(schema)
    node: Any = schema
    for part in path.split("."):
        node = named.get(node, node) if isinstance(node, str) else node
        (field,) = [f for f in node["fields"] if f["name"] == part]
        node = field["type"]
    node = named.get(node, node) if isinstance(node, str) else node
    items = node["items"]
    items = named.get(items, items) if isinstance(items, str) else items
    return [f["name"] for f in items["fields"]]


def partial_sql(table: Table, partial: Partial) -> str:
    """SELECT of one event type's partial rows: every view column, NULL where not named."""
    unknown = set(partial.columns) - set(table.column_names)
    if unknown:
        raise ValueError(f"{table.name} has no column {sorted(unknown)[0]!r}")
    fields = {name for name, _ in value_columns(reader_schema(partial.event_type))}
    exprs = []
    for c in view_columns(table):
        source = partial.columns.get(c.name)
        if isinstance(source, str) and source.split(".")[0] not in fields | {ITEM}:
            raise ValueError(f"{partial.event_type.value} has no field {source!r}")
        expr = "NULL" if source is None else source_sql(source)
        exprs.append(f"CAST({expr} AS {flink_type(c)}) AS {quote(c.name)}")
    sql = (f"  SELECT {', '.join(exprs)}\n  FROM {quote(table_name(partial.event_type))} "
           f"AS {quote(RECORD)}")
    if partial.unnest:
        names = ", ".join(quote(n) for n in _array_item_fields(partial.event_type,
                                                               partial.unnest))
        sql += f"\n  CROSS JOIN UNNEST({path_sql(partial.unnest)}) AS {ITEM} ({names})"
    if partial.where:
        sql += f"\n  WHERE {partial.where}"
    return sql


def rank_sql(column: Column, expr: str) -> str:
    whens = " ".join(f"WHEN {literal(v)} THEN {i}" for i, v in enumerate(column.ranks))
    return f"(CASE {expr} {whens} ELSE -1 END)"


def aggregate_sql(table: Table, column: Column) -> str:
    """The aggregate giving, over all of a key's partial rows, the upserts' merged value."""
    name = quote(column.name)
    merge = column.merge
    if merge is Merge.FIRST:
        return f"FIRST_VALUE({name})"  # Flink's FIRST_VALUE skips NULLs
    if merge is Merge.LAST:
        return f"LAST_VALUE({name})"
    if merge in (Merge.MIN, Merge.MAX):
        return f"{merge.name}({name})"
    if merge is Merge.SUM:
        return f"CASE WHEN COUNT(*) = 1 THEN SUM({name}) ELSE COALESCE(SUM({name}), 0) END"
    if merge is Merge.RANK:
        back = " ".join(f"WHEN {i} THEN {literal(v)}" for i, v in enumerate(column.ranks))
        return f"CASE MAX{rank_sql(column, name)} {back} END"
    if merge is Merge.FOLLOWS:
        status = table.column_by_name[column.follows]
        if len(status.ranks) > 9:
            raise ValueError(f"{status.name}: FOLLOWS packs a rank into one digit")
        packed = (f"CONCAT(CAST({rank_sql(status, quote(status.name))} + 1 AS STRING), "
                  f"CAST({name} AS STRING))")
        return f"CAST(SUBSTRING(MAX({packed}) FROM 2) AS {flink_type(column)})"
    raise ValueError(f"no Flink aggregate for {merge} ({table.name}.{column.name})")


def merged_sql(table: Table, partials: tuple[Partial, ...]) -> str:
    """The table's rows: the partial rows of every source, merged per primary key, then the
    derived columns computed from the merged ones (a query, no trailing semicolon)."""
    columns = view_columns(table)
    union = "\n  UNION ALL\n".join(partial_sql(table, p) for p in partials)
    merged = ",\n    ".join(
        quote(c.name) if c.name in table.primary_key else f"{aggregate_sql(table, c)} AS "
        f"{quote(c.name)}" for c in columns if c.merge is not Merge.DERIVED)
    plain = {c.name: quote(c.name) for c in columns if c.merge is not Merge.DERIVED}
    final = ",\n  ".join(
        f"CAST({c.derive_sql.format(**plain)} AS {flink_type(c)}) AS {quote(c.name)}"
        if c.merge is Merge.DERIVED else quote(c.name) for c in columns)
    keys = ", ".join(quote(k) for k in table.primary_key)
    return (f"SELECT\n  {final}\nFROM (\n  SELECT\n    {merged}\n  FROM (\n{union}\n  ) AS "
            f"`partial`\n  GROUP BY {keys}\n) AS `merged`")


def partials_of(projections: Mapping[EventType, Any], table: Table) -> tuple[Partial, ...]:
    """A builder's `Projection`s of `table` as partials: the builder's own definition of
    its rows (a JSON column, which Flink cannot carry, is left out with its `Call`)."""
    out = []
    for et, projection in projections.items():
        if projection.table is not table:
            continue
        columns = {name: source for name, source in projection.columns.items()
                   if flink_type(table.column_by_name[name]) is not None}
        if any(isinstance(s, Call) for s in columns.values()):
            raise ValueError(f"{table.name}: a conversion (Call) has no Flink expression")
        out.append(Partial(et, columns))
    return tuple(out)


@dataclass(frozen=True)
class FlinkView:
    """One generated view: its name (the table it mirrors), its columns and key (for a
    sink), its query, and how it differs from the consumers' table."""

    name: str
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...]
    query: str
    mirrors: str
    differences: tuple[str, ...] = ()

    def create_sql(self) -> str:
        """`CREATE TEMPORARY VIEW <name> AS ...;` with a header naming the differences."""
        header = [f"-- {self.name}: the consumers' {self.mirrors} (consumers/tables.py), "
                  "merged from the topics by Flink (generated by rlmesh-stream)"]
        header += [f"-- differs: {d}" for d in self.differences]
        return "\n".join(header) + (f"\nCREATE TEMPORARY VIEW {quote(self.name)} AS\n"
                                    f"{self.query};")


# What an order-dependent merge rule means in a view (the builder's order is the order it
# read the records in; Flink's is its own): equal when all of a key's partial rows agree.
_ARRIVAL = {
    Merge.FIRST: "the first non-NULL value read, by each engine in its own order",
    Merge.LAST: "the last non-NULL value read, by each engine in its own order",
    Merge.FOLLOWS: "among the rows of the highest status, the builder keeps the first "
                   "non-NULL value it read, Flink the largest as text",
}


def merge_differences(table: Table) -> tuple[str, ...]:
    """Per order-dependent merge rule, the columns it decides and how the engines differ."""
    notes = []
    for merge, how in _ARRIVAL.items():
        names = [c.name for c in view_columns(table)
                 if c.merge is merge and c.name not in table.primary_key]
        if names:
            notes.append(f"{', '.join(names)} ({merge.name}): {how}; the same value when "
                         "all of a key's events agree, as the runtime's do")
    return tuple(notes)


def table_view(table: Table, partials: tuple[Partial, ...],
               differences: tuple[str, ...] = ()) -> FlinkView:
    """The view mirroring `table`, generated from its definition and merge rules; its
    header names what it leaves out and where an engine's reading order may show."""
    gone = left_out(table)
    notes = ((f"left out: {', '.join(gone)} (JSON: a MetaMap is recursive, no Flink type)",)
             if gone else ())
    return FlinkView(table.name, tuple(view_columns(table)), table.primary_key,
                     merged_sql(table, partials), f"`{table.name}` table",
                     notes + merge_differences(table) + differences)

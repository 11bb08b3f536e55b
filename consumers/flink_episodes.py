"""The `episodes` table as a Flink SQL view over the generated topic tables.

For a team that outgrows one consumer process: the same rows as the episodes
builder (`builders/episodes.py`), computed by Flink from the tables of
`rlmesh-stream schemas sql --engine flink`. Derived from the table definition
(`tables.EPISODES`): every column's `Merge` becomes the aggregate that gives the
same result over a whole group of partial rows as the pairwise upserts give in
any order (FIRST: the first non-null, all partial rows agreeing; MIN, MAX, SUM as
named; RANK: the highest-ranked status). The builder's abandon rule follows:
an episode still `running` whose session ended or failed is `abandoned`.

Partial rows: each source event fills the columns named like its fields (route
columns from `route`), plus what `SOURCES` says (status, the record timestamp).
`final_info` (a MetaMap, recursive) has no Flink type and is left out.
"""

from __future__ import annotations

from rlmesh_stream.consumers.tables import EPISODE_STATUSES, EPISODES, Column, Merge, Table
from rlmesh_stream.schemas.contract.topics import EventType
from rlmesh_stream.schemas.engines.flink import quote, table_name, value_columns
from rlmesh_stream.schemas.engines.reader import reader_schema

VIEW_NAME = "episodes"

# Per source event: the columns it fills that are not its own fields.
SOURCES: dict[EventType, dict[str, str]] = {
    EventType.EPISODE_STARTED: {"status": "'running'", "started_at": "`kafka_timestamp`"},
    EventType.EPISODE_COMPLETED: {"status": "'completed'", "completed_at": "`kafka_timestamp`"},
}
SESSION_ENDS = (EventType.SESSION_ENDED, EventType.SESSION_FAILED)

_FLINK_TYPES = {"TEXT": "STRING", "BIGINT": "BIGINT", "INTEGER": "INT", "DOUBLE": "DOUBLE",
                "BOOLEAN": "BOOLEAN", "TIMESTAMPTZ": "TIMESTAMP_LTZ(3)"}


def flink_column_type(column: Column) -> str | None:
    """The Flink type of a table column; None for one Flink cannot carry (JSON)."""
    return _FLINK_TYPES.get(column.type)


def view_columns(table: Table = EPISODES) -> list[Column]:
    """The columns the view has: every table column with a Flink type."""
    return [c for c in table.columns if flink_column_type(c) is not None]


def _aggregate(column: Column) -> str:
    name = quote(column.name)
    if column.merge is Merge.FIRST:
        return f"FIRST_VALUE({name})"  # Flink's FIRST_VALUE always skips NULLs
    if column.merge in (Merge.MIN, Merge.MAX, Merge.SUM):
        return f"{column.merge.name}({name})"
    if column.merge is Merge.RANK:
        ranks = " ".join(f"WHEN '{v}' THEN {i}" for i, v in enumerate(column.ranks))
        back = " ".join(f"WHEN {i} THEN '{v}'" for i, v in enumerate(column.ranks))
        return f"CASE MAX(CASE {name} {ranks} ELSE -1 END) {back} END"
    raise ValueError(f"no Flink aggregate for {column.merge} ({column.name})")


def _partial(event_type: EventType, columns: list[Column]) -> str:
    fields = {name for name, _ in value_columns(reader_schema(event_type))}
    route = {"env_id", "env_component_id", "model_component_id", "lane"}
    extra = SOURCES[event_type]
    exprs = []
    for c in columns:
        ftype = flink_column_type(c)
        if c.name in extra:
            expr = extra[c.name]
        elif c.name in fields:
            expr = quote(c.name)
        elif c.name in route:
            expr = f"`route`.{quote(c.name)}"
        else:
            expr = "NULL"
        exprs.append(f"CAST({expr} AS {ftype}) AS {quote(c.name)}")
    return f"  SELECT {', '.join(exprs)}\n  FROM {quote(table_name(event_type))}"


def episodes_view(table: Table = EPISODES) -> str:
    """`CREATE TEMPORARY VIEW episodes AS ...` over the generated topic tables."""
    columns = view_columns(table)
    left_out = [c.name for c in table.columns if flink_column_type(c) is None]
    keys = [quote(k) for k in table.primary_key]
    status = table.column_by_name["status"]
    if status.ranks != EPISODE_STATUSES:
        raise ValueError("the abandon rule below assumes the episode statuses")
    partials = "\n  UNION ALL\n".join(_partial(et, columns) for et in SOURCES)
    merged = ",\n    ".join(
        quote(c.name) if c.name in table.primary_key else f"{_aggregate(c)} AS {quote(c.name)}"
        for c in columns)
    ends = "\n    UNION\n".join(f"    SELECT `session_id` FROM {quote(table_name(et))}"
                               for et in SESSION_ENDS)
    final = ",\n  ".join(
        "CASE WHEN m.`status` = 'running' AND e.`session_id` IS NOT NULL THEN 'abandoned' "
        "ELSE m.`status` END AS `status`" if c.name == "status" else f"m.{quote(c.name)}"
        for c in columns)
    return (f"-- {VIEW_NAME}: the consumers' {table.name} table (consumers/tables.py), "
            "merged from the topics in Flink\n"
            f"-- left out: {', '.join(left_out)} (a MetaMap: recursive, no Flink type)\n"
            f"CREATE TEMPORARY VIEW {quote(VIEW_NAME)} AS\n"
            f"WITH `partial` AS (\n{partials}\n), `merged` AS (\n"
            f"  SELECT\n    {merged}\n  FROM `partial`\n  GROUP BY {', '.join(keys)}\n"
            f"), `session_ends` AS (\n{ends}\n)\n"
            f"SELECT\n  {final}\nFROM `merged` AS m\n"
            "LEFT JOIN `session_ends` AS e ON m.`session_id` = e.`session_id`;")

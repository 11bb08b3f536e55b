"""The tables the consumers build: one declarative definition, rendered per SQL dialect.

Why declarative: every table is written by order-independent upserts. Each
column says how a new partial row merges into the stored one (`Merge`), and
the same rule is applied twice: in Python, to pre-merge the rows of one batch
(an `INSERT ... ON CONFLICT DO UPDATE` may not touch one row twice), and in
SQL, to merge the batch into the table. So any arrival order of a session's
events, across topics and batches, yields the same row.

The analysis engineer's reports read these tables by these names. Types are
portable between DuckDB and PostgreSQL; JSON is `JSON` in DuckDB and `JSONB`
in PostgreSQL.

Nullable keys: a whole-env session has no lane (`lane` NULL), but key columns
cannot be NULL, so keyed tables carry `lane_key = COALESCE(lane, -1)` in the
primary key next to the nullable `lane`.

Size (over 500 lines, on purpose): this is the one place a table is defined, so about
half of it is the definitions themselves (columns, merge rules, docs of ten tables and a
view, the delivery ranges' merge SQL); the other half is the small renderer that turns
them into DDL and upserts per dialect. Splitting the definitions from their renderer
would put the two halves of every merge rule (Python and SQL) in different files.
"""

from __future__ import annotations

import enum
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
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


# --------------------------------------------------------------------------- merges


@dataclass(frozen=True)
class MergeRule:
    """One merge rule, twice: in Python over values, in SQL over expressions.

    Both take (old, new, wins): the stored and the incoming value, and whether the
    incoming row outranks the stored one (RANK: on the column itself; FOLLOWS: on the
    status column it follows; unused otherwise).
    """

    python: Callable[[Any, Any, bool], Any]
    sql: Callable[[str, str, str], str]


def _coalesce(first: Any, second: Any) -> Any:
    return first if first is not None else second


def _new_if(better: Callable[[Any, Any], bool], op: str) -> MergeRule:
    """The incoming value when the stored one is NULL or it is `better` (MIN, MAX)."""
    return MergeRule(
        lambda old, new, _: new if old is None or (new is not None and better(new, old))
        else old,
        lambda old, new, _: (f"CASE WHEN {old} IS NULL OR ({new} IS NOT NULL AND "
                             f"{new} {op} {old}) THEN {new} ELSE {old} END"))


MERGE_RULES: dict[Merge, MergeRule] = {
    Merge.FIRST: MergeRule(lambda old, new, _: _coalesce(old, new),
                           lambda old, new, _: f"COALESCE({old}, {new})"),
    Merge.LAST: MergeRule(lambda old, new, _: _coalesce(new, old),
                          lambda old, new, _: f"COALESCE({new}, {old})"),
    Merge.SUM: MergeRule(lambda old, new, _: (old or 0) + (new or 0),
                         lambda old, new, _: f"COALESCE({old}, 0) + COALESCE({new}, 0)"),
    Merge.MIN: _new_if(operator.lt, "<"),
    Merge.MAX: _new_if(operator.gt, ">"),
    Merge.RANK: MergeRule(lambda old, new, wins: new if wins else old,
                          lambda old, new, wins: f"CASE WHEN {wins} THEN {new} ELSE {old} END"),
    Merge.FOLLOWS: MergeRule(
        lambda old, new, wins: _coalesce(new, old) if wins else _coalesce(old, new),
        lambda old, new, wins: (f"CASE WHEN {wins} THEN COALESCE({new}, {old}) "
                                f"ELSE COALESCE({old}, {new}) END")),
    # DERIVED has no rule: it is recomputed from the merged row (`finish_row`, `merge_sql`)
}


def _ranking(table: Table, column: Column) -> Column | None:
    """The status column whose rank decides `column`'s merge (RANK, FOLLOWS), if any."""
    if column.merge is Merge.RANK:
        return column
    if column.merge is Merge.FOLLOWS:
        return table.column_by_name[column.follows]
    return None


def merge_value(column: Column, old: Any, new: Any, new_wins: bool = False) -> Any:
    """The Python twin of `merge_sql`: merge one column of two partial rows.

    `new_wins` is only read by Merge.FOLLOWS: whether the new row's status outranks.
    """
    if column.merge is Merge.DERIVED:
        return old  # recomputed by merge_rows
    if column.merge is Merge.RANK:
        new_wins = _rank(column, new) > _rank(column, old)
    return MERGE_RULES[column.merge].python(old, new, new_wins)


def _rank(column: Column, value: Any) -> int:
    return column.ranks.index(value) if value in column.ranks else -1


_MergeStep = tuple[Callable[[Any, Any, bool], Any], str | None, dict[Any, int]]


@dataclass(frozen=True)
class _MergePlan:
    """A table's merge rules worked out once (the batch hot path): per column its rule's
    Python twin and the status column (with its ranks) whose winner the rule reads."""

    steps: dict[str, _MergeStep]
    sums: tuple[str, ...]  # SUM columns: the only rule that changes a value for a NULL


def _keep_old(old: Any, new: Any, wins: bool) -> Any:
    return old  # DERIVED: recomputed by finish_row


def _merge_plan(table: Table) -> _MergePlan:
    plan: _MergePlan | None = table.__dict__.get("_merge_plan")
    if plan is None:
        steps: dict[str, _MergeStep] = {}
        for c in table.columns:
            status = _ranking(table, c)
            rule = _keep_old if c.merge is Merge.DERIVED else MERGE_RULES[c.merge].python
            ranks: dict[Any, int] = {}
            for i, v in enumerate(status.ranks if status is not None else ()):
                ranks.setdefault(v, i)  # as tuple.index: the first place
            steps[c.name] = (rule, None if status is None else status.name, ranks)
        sums = tuple(c.name for c in table.columns if c.merge is Merge.SUM)
        plan = _MergePlan(steps, sums)
        object.__setattr__(table, "_merge_plan", plan)  # a cache on the frozen table
    return plan


def merge_rows(table: Table, old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """Merge two partial rows of the same key, exactly as the SQL upsert does.

    A column absent from either row merges as NULL. Every rule but SUM keeps the
    stored value for an incoming NULL, so only the new row's non-NULL values (and
    the SUM columns) are merged: a partial row costs what it holds.
    """
    plan = _merge_plan(table)
    steps = plan.steps
    old_get, new_get = old.get, new.get
    merged = {c: old_get(c) for c in table.column_names}
    for name, value in new.items():
        if value is None:
            continue
        step = steps.get(name)
        if step is None:
            continue  # not a column of the table
        rule, status, ranks = step
        wins = status is not None and (
            ranks.get(new_get(status), -1) > ranks.get(old_get(status), -1))
        merged[name] = rule(old_get(name), value, wins)
    for name in plan.sums:
        if new_get(name) is None:
            merged[name] = steps[name][0](old_get(name), None, False)
    return finish_row(table, merged)


def tuple_merger(table: Table) -> Callable[[tuple[Any, ...], tuple[Any, ...]], tuple[Any, ...]]:
    """`merge_rows` for packed rows (every column, in the table's order), generated once
    per table from the same rules: FIRST and LAST inline, the others call their rule."""
    merge: Any = table.__dict__.get("_tuple_merger")
    if merge is not None:
        return merge  # type: ignore[no-any-return]
    if table.has_derived:
        raise ValueError(f"{table.name}: packed rows do not support derived columns")
    index = {name: i for i, name in enumerate(table.column_names)}
    ns: dict[str, Any] = {}
    wins: dict[str, str] = {}
    lines, exprs = [], []
    for i, c in enumerate(table.columns):
        if c.merge is Merge.FIRST:
            exprs.append(f"o[{i}] if o[{i}] is not None else n[{i}]")
            continue
        if c.merge is Merge.LAST:
            exprs.append(f"n[{i}] if n[{i}] is not None else o[{i}]")
            continue
        status = _ranking(table, c)
        flag = "False"
        if status is not None:
            if status.name not in wins:
                s = index[status.name]
                ranks: dict[Any, int] = {}
                for r, v in enumerate(status.ranks):
                    ranks.setdefault(v, r)  # as tuple.index: the first place
                ns[f"R{s}"] = ranks.get
                wins[status.name] = f"w{s}"
                lines.append(f"w{s} = R{s}(n[{s}], -1) > R{s}(o[{s}], -1)")
            flag = wins[status.name]
        ns[f"M{i}"] = MERGE_RULES[c.merge].python
        exprs.append(f"M{i}(o[{i}], n[{i}], {flag})")
    body = "".join(f"    {line}\n" for line in lines)
    source = f"def merge(o, n):\n{body}    return ({', '.join(exprs)},)\n"
    exec(compile(source, f"<merge {table.name}>", "exec"), ns)
    merge = ns["merge"]
    object.__setattr__(table, "_tuple_merger", merge)  # a cache on the frozen table
    return merge  # type: ignore[no-any-return]


def finish_row(table: Table, row: dict[str, Any]) -> dict[str, Any]:
    """Fill the derived columns of a (merged) row."""
    if not table.has_derived:
        return row
    for c in table.columns:
        if c.merge is Merge.DERIVED and c.derive is not None:
            row[c.name] = c.derive(row)
    return row


def merge_sql(table: Table, column: Column) -> str:
    """SQL for `SET column = ...` in `ON CONFLICT DO UPDATE`: stored is `t.c`, new `excluded.c`."""
    t, n = table.name, "excluded"
    if column.merge is Merge.DERIVED:
        # derive_sql names merged columns as {col}; substitute their merge expressions
        exprs = {other.name: f"({merge_sql(table, other)})" for other in table.columns
                 if other.merge is not Merge.DERIVED}
        return column.derive_sql.format(**exprs)
    status = _ranking(table, column)
    wins = "" if status is None else (
        f"{rank_sql(status, f'{n}.{status.name}')} > {rank_sql(status, f'{t}.{status.name}')}")
    return MERGE_RULES[column.merge].sql(f"{t}.{column.name}", f"{n}.{column.name}", wins)


def rank_sql(column: Column, expr: str) -> str:
    whens = " ".join(f"WHEN '{v}' THEN {i}" for i, v in enumerate(column.ranks))
    return f"(CASE {expr} {whens} ELSE -1 END)"


# --------------------------------------------------------------------------- DDL


def column_defs(table: Table, dialect: Dialect) -> str:
    return ",\n  ".join(
        f"{c.name} {sql_type(c, dialect)}{'' if c.nullable else ' NOT NULL'}"
        for c in table.columns
    )


def create_table_sql(table: Table, dialect: Dialect) -> str:
    """The table, its key a PRIMARY KEY; in DuckDB only where ON CONFLICT names it.

    DuckDB upserts with `merge_into_sql`, which keeps keys unique by itself and, from
    DuckDB 1.4, joins by a scan rather than the key's index: the index (an ART) would
    only be maintained, at about a sixth of the sink's time (docs/benchmarks.md, "Round
    three"). Its key columns are NOT NULL all the same.
    """
    if dialect is Dialect.DUCKDB and not table.conflict_target:
        keyed = Table(table.name, tuple(replace(c, nullable=False) if c.name in table.primary_key
                                        else c for c in table.columns), table.primary_key)
        return f"CREATE TABLE IF NOT EXISTS {table.name} (\n  {column_defs(keyed, dialect)}\n)"
    cols = column_defs(table, dialect)
    return (f"CREATE TABLE IF NOT EXISTS {table.name} (\n  {cols},\n"
            f"  PRIMARY KEY ({', '.join(table.primary_key)})\n)")


def add_column_sql(table: Table, column: Column, dialect: Dialect) -> str:
    """Migration: a column added to a table definition is added to an existing table."""
    return f"ALTER TABLE {table.name} ADD COLUMN {column.name} {sql_type(column, dialect)}"


def upsert_sql(table: Table, source: str) -> str:
    """Merge the staged rows of `source` (same columns) into `table`.

    Derived columns are computed by SQL on insert as on update, so a row's value
    never depends on whether its last batch inserted or updated it.
    """
    return (f"INSERT INTO {table.name} ({', '.join(table.column_names)})\n"
            f"SELECT {_insert_values(table)} FROM {source}\n"
            f"ON CONFLICT ({', '.join(table.primary_key)}) DO UPDATE SET\n  {_merge_sets(table)}")


def merge_into_sql(table: Table, source: str) -> str:
    """`upsert_sql` as a `MERGE INTO` (DuckDB >= 1.4): the same merge expressions (the
    staged row named `excluded`) and inserted values, so the same rows.

    DuckDB plans `ON CONFLICT DO UPDATE` as this MERGE over `SELECT DISTINCT ON (key)` of
    the source; a batch's keys are distinct already (one merged row per key), so the MERGE
    skips that aggregation, about a fifth of the statement (docs/benchmarks.md, "Sink
    staging and upsert").
    """
    t = table.name
    on = " AND ".join(f"{t}.{k} = excluded.{k}" for k in table.primary_key)
    return (f"MERGE INTO {t} USING {source} AS excluded ON ({on})\n"
            f"WHEN MATCHED THEN UPDATE SET\n  {_merge_sets(table)}\n"
            f"WHEN NOT MATCHED THEN INSERT ({', '.join(table.column_names)})\n"
            f"VALUES ({_insert_values(table, 'excluded.')})")


def _insert_values(table: Table, qualifier: str = "") -> str:
    """The values inserting a staged row: its columns, derived ones computed; a SELECT
    list (named) unqualified, a VALUES list with the staged relation's `qualifier`."""
    staged = {c.name: f"{qualifier}{c.name}" for c in table.columns}
    return ", ".join(
        staged[c.name] if c.merge is not Merge.DERIVED
        else c.derive_sql.format(**staged) + ("" if qualifier else f" AS {c.name}")
        for c in table.columns)


def _merge_sets(table: Table) -> str:
    """The SET list merging a staged row (`excluded`) into the stored one."""
    return ",\n  ".join(f"{c.name} = {merge_sql(table, c)}"
                         for c in table.columns if c.name not in table.primary_key)


# --------------------------------------------------------------------------- tables


def _route(merge: Merge = Merge.FIRST, key: bool = False) -> tuple[Column, ...]:
    """The route columns every table slices by (`RuntimeEnvContext`)."""
    return (
        Column("env_id", "TEXT", merge, nullable=not key),
        Column("env_component_id", "TEXT", merge),
        Column("model_component_id", "TEXT", merge, nullable=not key),
        Column("lane", "BIGINT", merge, doc="NULL for a whole-env session"),
    )


EPISODE_STATUSES = ("running", "abandoned", "completed")  # lowest precedence first
SESSION_STATUSES = ("running", "ended", "failed")

EPISODES = Table(
    "episodes",
    (
        Column("session_id", "TEXT", nullable=False),
        Column("episode_record_id", "TEXT", nullable=False),
        Column("episode_id", "TEXT"),
        *_route(),
        Column("episode_index", "BIGINT"),
        Column("env_index", "BIGINT"),
        Column("seed", "BIGINT"),
        Column("trial_index", "BIGINT", doc="u64 in Rust; fits BIGINT below 2**63"),
        Column("started_from_auto_reset", "BOOLEAN"),
        Column("status", "TEXT", Merge.RANK, ranks=EPISODE_STATUSES,
               doc="completed > abandoned (its session ended or failed first) > running"),
        Column("step_count", "BIGINT"),
        Column("cumulative_reward", "DOUBLE"),
        Column("terminated", "BOOLEAN"),
        Column("truncated", "BOOLEAN"),
        Column("success", "BOOLEAN"),
        Column("duration_ms", "BIGINT"),
        Column("predict_ms", "DOUBLE"),
        Column("step_ms", "DOUBLE"),
        Column("final_info", "JSON", doc="MetaMap as JSON; bytes as base64 strings"),
        Column("started_at", "TIMESTAMPTZ", Merge.MIN, doc="episode_started record timestamp"),
        Column("completed_at", "TIMESTAMPTZ", Merge.MIN,
               doc="episode_completed record timestamp"),
    ),
    ("session_id", "episode_record_id"),
    "One row per episode, merged from episode_started and episode_completed in any order.",
)

EPISODE_SESSION_ENDS = Table(
    "episode_session_ends",
    (
        Column("session_id", "TEXT", nullable=False),
        Column("ended_at", "TIMESTAMPTZ", Merge.MIN),
        Column("status", "TEXT", Merge.RANK, ranks=SESSION_STATUSES),
    ),
    ("session_id",),
    "The episodes builder's own record of which sessions ended or failed, so an episode "
    "read after its session's end is still marked abandoned (no cross-builder reads).",
)

SESSIONS = Table(
    "sessions",
    (
        Column("session_id", "TEXT", nullable=False),
        *_route(),
        Column("status", "TEXT", Merge.RANK, ranks=SESSION_STATUSES,
               doc="failed > ended > running"),
        Column("reason", "TEXT", Merge.FOLLOWS, follows="status"),
        Column("total_steps", "BIGINT", Merge.FOLLOWS, follows="status"),
        Column("total_episodes", "BIGINT", Merge.FOLLOWS, follows="status"),
        Column("started_at", "TIMESTAMPTZ", Merge.MIN),
        Column("ended_at", "TIMESTAMPTZ", Merge.MIN),
        Column("env_connected_at", "TIMESTAMPTZ", Merge.MIN),
        Column("model_connected_at", "TIMESTAMPTZ", Merge.MIN),
    ),
    ("session_id",),
    "One row per session: route, lifecycle times, how it ended.",
)

ADVISORIES = Table(
    "advisories",
    (
        Column("session_id", "TEXT", nullable=False),
        Column("leg", "TEXT", nullable=False),
        Column("severity", "TEXT", nullable=False),
        Column("message", "TEXT", nullable=False),
        Column("count", "BIGINT", Merge.SUM),
        Column("first_seen", "TIMESTAMPTZ", Merge.MIN),
        Column("last_seen", "TIMESTAMPTZ", Merge.MAX),
        *_route(),
    ),
    ("session_id", "leg", "severity", "message"),
    "One row per distinct relay advisory of a session.",
)


def _ratio(num: str, den: str = "count") -> tuple[Callable[[Mapping[str, Any]], Any], str]:
    def derive(row: Mapping[str, Any]) -> Any:
        d = row.get(den) or 0
        return float(row[num]) / d if d and row[num] is not None else None

    return derive, f"CAST({{{num}}} AS DOUBLE PRECISION) / NULLIF({{{den}}}, 0)"


def _weighted(name: str, doc: str) -> tuple[Column, Column]:
    derive, derive_sql = _ratio(f"{name}_total")
    return (
        Column(f"{name}_total", "DECIMAL", Merge.SUM,
               doc=f"sum of count * {name}, each rounded to 1e-9 (internal)"),
        Column(name, "DOUBLE", Merge.DERIVED, derive=derive, derive_sql=derive_sql, doc=doc),
    )


TELEMETRY_ROLLUPS = Table(
    "telemetry_rollups",
    (
        Column("window_start", "TIMESTAMPTZ", nullable=False),
        Column("window_end", "TIMESTAMPTZ"),
        # no env_component_id: several components' rows share a rollup row, and keeping
        # whichever came first would make the row depend on arrival order
        *(c for c in _route(key=True) if c.name != "env_component_id"),
        Column("lane_key", "BIGINT", nullable=False, doc="COALESCE(lane, -1), for the key"),
        Column("op", "TEXT", nullable=False),
        Column("component", "TEXT", nullable=False),
        Column("metric", "TEXT", nullable=False),
        Column("kind", "TEXT"),
        Column("count", "BIGINT", Merge.SUM, doc="samples in the window (exact)"),
        Column("row_count", "BIGINT", Merge.SUM, doc="snapshot rows merged into this rollup"),
        *_weighted("avg", "count-weighted mean of the rows' avg: exact"),
        *_weighted("p50", "count-weighted mean of the rows' p50: an estimate"),
        *_weighted("p95", "count-weighted mean of the rows' p95: an estimate"),
        *_weighted("p99", "count-weighted mean of the rows' p99: an estimate"),
        Column("max_p99", "DOUBLE", Merge.MAX, doc="largest row p99: an upper bound of p99"),
    ),
    ("window_start", "env_id", "model_component_id", "lane_key", "op", "component", "metric"),
    "Window telemetry per tumbling window (by record timestamp) and route/op/component/metric. "
    "Percentile estimator: the count-weighted mean of the rows' percentiles. The q-quantile "
    "of a mixture always lies between the smallest and the largest of its parts' "
    "q-quantiles, so the estimate's error is at most (max - min) of the merged rows' "
    "percentiles, plus each row's own reservoir-sampling error; it is exact when one row "
    "makes the window. max_p99 is an upper bound of the window's true p99 (up to sampling).",
)

TELEMETRY_SESSIONS = Table(
    "telemetry_sessions",
    (
        Column("session_id", "TEXT", nullable=False),
        Column("op", "TEXT", nullable=False),
        Column("component", "TEXT", nullable=False),
        Column("metric", "TEXT", nullable=False),
        Column("kind", "TEXT", Merge.LAST),
        Column("count", "BIGINT", Merge.LAST),
        Column("avg", "DOUBLE", Merge.LAST),
        Column("p50", "DOUBLE", Merge.LAST),
        Column("p95", "DOUBLE", Merge.LAST),
        Column("p99", "DOUBLE", Merge.LAST),
        *_route(),
    ),
    ("session_id", "op", "component", "metric"),
    "The exact Session-horizon snapshot rows, one per session and op/component/metric.",
)

STEPS = Table(
    "steps",
    (
        Column("session_id", "TEXT", nullable=False),
        Column("step_offset", "BIGINT", nullable=False,
               doc="the step_completed record's offset: identifies the group step, since "
                   "`step` is the primary lane's episode step and repeats within a session"),
        Column("slot", "INTEGER", nullable=False, doc="position in the step's per-lane vectors"),
        Column("step", "BIGINT", doc="the primary lane's step, as the event carries it"),
        Column("episode_record_id", "TEXT",
               doc="the primary slot's episode only: step_completed names no other lane's"),
        *_route(),
        Column("reward", "DOUBLE"),
        Column("terminated", "BOOLEAN"),
        Column("truncated", "BOOLEAN"),
        Column("autoreset_roll", "BOOLEAN"),
        Column("predict_ms", "DOUBLE"),
        Column("step_ms", "DOUBLE"),
        Column("completed_at", "TIMESTAMPTZ", Merge.MIN),
    ),
    ("session_id", "step_offset", "slot"),
    "Optional (off by default): one row per lane of each step_completed event.",
)

DELIVERY_SEQUENCES = Table(
    "delivery_sequences",
    (
        Column("producer_id", "TEXT", nullable=False),
        Column("first_seq", "BIGINT", nullable=False),
        Column("last_seq", "BIGINT", nullable=False),
        Column("records", "BIGINT", doc="records read with a sequence in the range"),
    ),
    ("producer_id", "first_seq"),
    "Every producer sequence number seen, as contiguous ranges [first_seq, last_seq] per "
    "producer (disjoint, never adjacent), with how many records they hold: storage grows "
    "with the gaps, not the events. A record whose sequence falls in a stored range is a "
    "duplicate; the space between ranges are gaps. Shared by all consumer processes, so "
    "gaps are computed over the whole fleet's topics, not one process's share. Written by "
    "`DELIVERY_MERGE_SQL` from the batch's `delivery_batch` rows, in the batch's transaction.",
    conflict_target=True,
)

DELIVERY_BATCH = Table(
    "delivery_batch",
    (
        Column("producer_id", "TEXT", nullable=False),
        Column("seq", "BIGINT", nullable=False),
        Column("copies", "BIGINT", Merge.SUM, doc="records of the batch with this sequence"),
    ),
    ("producer_id", "seq"),
    "One checkpoint's sequences (staged only, no table of its own): merged into "
    "`delivery_sequences` by `DELIVERY_MERGE_SQL`.",
    stage_only=True,
)

_TOUCHED = "producer_id IN (SELECT producer_id FROM {stage:delivery_batch})"

INVALID_HEADERS = Table(
    "invalid_headers",
    (
        Column("topic", "TEXT", nullable=False),
        Column("partition_id", "INTEGER", nullable=False),
        Column("record_offset", "BIGINT", nullable=False),
        Column("header", "TEXT", nullable=False),
        Column("producer_id", "TEXT"),
        Column("header_value", "TEXT", doc="as read (UTF-8, invalid bytes replaced)"),
        Column("reason", "TEXT"),
        Column("record_time", "TIMESTAMPTZ", Merge.MIN),
    ),
    ("topic", "partition_id", "record_offset", "header"),
    "Records whose delivery headers cannot be used (a `rlmesh.seq` that is not a decimal "
    "number in [0, MAX_SEQUENCE]): left out of `delivery_sequences`, so they can neither "
    "stop ingestion nor hide or invent a gap, and counted here by `report delivery`. The "
    "record itself is applied by the other builders as usual.",
)

DELIVERY_MERGE_SQL: tuple[str, ...] = (
    # 1. the islands of (the touched producers' stored ranges + the batch's sequences) that
    # hold a sequence of the batch, written over the range each one starts at
    "INSERT INTO delivery_sequences (producer_id, first_seq, last_seq, records)\n"
    "SELECT producer_id, MIN(first_seq), MAX(last_seq), SUM(records) FROM (\n"
    # Both windows must order rows alike, ties included: (first_seq, last_seq, fresh) is
    # unique per producer (stored ranges are disjoint, the batch's sequences distinct).
    "  SELECT *, SUM(starts) OVER (PARTITION BY producer_id ORDER BY first_seq, last_seq, fresh\n"
    "                              ROWS UNBOUNDED PRECEDING) AS island FROM (\n"
    "    SELECT *, CASE WHEN first_seq <= 1 + MAX(last_seq) OVER (\n"
    "        PARTITION BY producer_id ORDER BY first_seq, last_seq, fresh\n"
    "        ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) THEN 0 ELSE 1 END AS starts\n"
    "    FROM (\n"
    "      SELECT producer_id, first_seq, last_seq, records, 0 AS fresh\n"
    f"      FROM delivery_sequences WHERE {_TOUCHED}\n"
    "      UNION ALL\n"
    "      SELECT producer_id, seq, seq, copies, 1 FROM {stage:delivery_batch}\n"
    "    ) AS items\n"
    "  ) AS marked\n"
    ") AS numbered\n"
    "GROUP BY producer_id, island HAVING MAX(fresh) = 1\n"
    "ON CONFLICT (producer_id, first_seq) DO UPDATE SET\n"
    "  last_seq = excluded.last_seq, records = excluded.records",
    # 2. the stored ranges an island of step 1 now covers
    "DELETE FROM delivery_sequences USING (\n"
    "  SELECT producer_id, first_seq FROM (\n"
    "    SELECT producer_id, first_seq, MAX(last_seq) OVER (\n"
    "        PARTITION BY producer_id ORDER BY first_seq\n"
    "        ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS reach\n"
    f"    FROM delivery_sequences WHERE {_TOUCHED}\n"
    "  ) AS w WHERE first_seq <= reach\n"
    ") AS covered\n"
    "WHERE delivery_sequences.producer_id = covered.producer_id\n"
    "  AND delivery_sequences.first_seq = covered.first_seq",
)

# Migration: a `delivery_sequences` of one row per sequence (producer_id, seq, copies,
# first_topic), as written before ranges, folded into its ranges.
LEGACY_DELIVERY_COLUMN = "seq"
LEGACY_DELIVERY_SCRATCH = "delivery_sequences_migrating"  # the ranges, while the table is redone
LEGACY_DELIVERY_RANGES_SQL = (
    f"CREATE TABLE {LEGACY_DELIVERY_SCRATCH} AS\n"
    "SELECT producer_id, MIN(seq) AS first_seq, MAX(seq) AS last_seq, SUM(copies) AS records\n"
    "FROM (SELECT producer_id, seq, copies,\n"
    "             seq - ROW_NUMBER() OVER (PARTITION BY producer_id ORDER BY seq) AS island\n"
    "      FROM delivery_sequences) AS s\n"
    "GROUP BY producer_id, island"
)

DELIVERY_PRODUCERS = View(
    "delivery_producers",
    "SELECT producer_id,\n"
    "  SUM(records) AS records,\n"
    "  CAST(SUM(last_seq - first_seq + 1) AS BIGINT) AS distinct_sequences,\n"
    "  MIN(first_seq) AS min_seq,\n"
    "  MAX(last_seq) AS max_seq,\n"
    "  MAX(last_seq) + 1 - CAST(SUM(last_seq - first_seq + 1) AS BIGINT) AS gaps,\n"
    "  SUM(records) - CAST(SUM(last_seq - first_seq + 1) AS BIGINT) AS duplicates\n"
    "FROM delivery_sequences GROUP BY producer_id",
    "Per producer id: records read, sequence gaps (sequences start at 0, so missing "
    "numbers below max_seq: the space before and between its ranges) and duplicate records "
    "(records beyond one per distinct sequence).",
)

DEAD_LETTERS = Table(
    "dead_letters",
    (
        Column("topic", "TEXT", nullable=False),
        Column("partition_id", "INTEGER", nullable=False),
        Column("record_offset", "BIGINT", nullable=False),
        Column("builder", "TEXT"),
        Column("error", "TEXT"),
        Column("seen_at", "TIMESTAMPTZ", Merge.MIN),
        Column("dead_letter_topic", "TEXT", Merge.LAST,
               doc="the topic holding the record's copy; NULL when that topic refused it "
                   "for good (too large for it, say): then `error` ends with why, and "
                   "the record is only in its source topic, at its offset"),
    ),
    ("topic", "partition_id", "record_offset"),
    "Records no builder can apply: undecodable, or of another event type than their "
    "topic's (each also copied to the dead-letter topic when it takes it).",
)

CONSUMER_OFFSETS = Table(
    "consumer_offsets",
    (
        Column("builder", "TEXT", nullable=False),
        Column("topic", "TEXT", nullable=False),
        Column("partition_id", "INTEGER", nullable=False),
        Column("next_offset", "BIGINT", Merge.LAST, nullable=False),
        Column("group_id", "TEXT", Merge.LAST),
        Column("updated_at", "TIMESTAMPTZ", Merge.LAST),
        Column("written_by", "TEXT", Merge.LAST, doc="host:pid of the last writing process"),
    ),
    ("builder", "topic", "partition_id"),
    "The next offset each builder applies per partition, written in the same transaction "
    "as the rows: the source of truth for where to resume (Kafka commits are for lag tools).",
    conflict_target=True,
)

TABLES: tuple[Table, ...] = (
    EPISODES, EPISODE_SESSION_ENDS, SESSIONS, ADVISORIES, TELEMETRY_ROLLUPS,
    TELEMETRY_SESSIONS, STEPS, DELIVERY_SEQUENCES, INVALID_HEADERS, DEAD_LETTERS,
    CONSUMER_OFFSETS,
)
VIEWS: tuple[View, ...] = (DELIVERY_PRODUCERS,)
TABLES_BY_NAME: dict[str, Table] = {t.name: t for t in TABLES}
OWNED_NAMES: frozenset[str] = frozenset(
    [*(t.name for t in TABLES), DELIVERY_BATCH.name, *(v.name for v in VIEWS),
     LEGACY_DELIVERY_SCRATCH])
"""Every relation the consumers create (tables, views, the staged batch, the migration's
scratch table): names nothing else may write, in lower case."""


def is_consumers_own(name: str) -> bool:
    """Whether `name` is a consumers' relation in any letter case (DuckDB identifiers and
    PostgreSQL's unquoted ones fold case), so no other writer may replace it."""
    return name.lower() in OWNED_NAMES


def create_view_sql(view: View) -> str:
    return f"CREATE OR REPLACE VIEW {view.name} AS\n{view.sql}"

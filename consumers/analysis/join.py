"""Join episodes with a training log, inside DuckDB.

An eval number is read against training: which checkpoint, at which training
step, with what loss. A training log (JSONL, CSV or Parquet, typically one row
per step: a step, a wall-clock time, a checkpoint id, metrics) is joined to the
`episodes` table in one of two ways:

- `key`: an episode's `model_component_id` (configurable) equals the log's
  checkpoint column. A checkpoint's row is the *first* log row naming it (the
  step at which it was saved), so logs that repeat the current checkpoint on
  every step still give one row per checkpoint.
- `asof`: each episode gets the latest log row at or before its `started_at`
  (or `completed_at`): the policy version that was live when it ran, for actors
  that follow a moving checkpoint. This is DuckDB's ASOF join.

Everything runs as SQL in an in-memory DuckDB that attaches the store, so the
work is the database's joins, never a Python loop over rows. Timestamps are
normalised to instants first; a timestamp without a UTC offset is ambiguous
and refused unless the caller names the log's time zone, and with a zone named,
local times that a DST change makes ambiguous or nonexistent are refused too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import duckdb

from rlmesh_stream.consumers.analysis.reports.store import (
    StoreError,
    duckdb_open_message,
    duckdb_path,
    is_postgres,
)

Mode = Literal["key", "asof"]
EpisodeTime = Literal["started_at", "completed_at"]
LOG_FORMATS = ("jsonl", "csv", "parquet")
TRAIN_PREFIX = "train_"
"""Log columns appear in the joined table as `train_<name>`, so they cannot
collide with an episode column of the same name."""

_OFFSET_RE = r"\d{1,2}:\d{2}(:\d{2}(\.\d+)?)?\s*(Z|z|UTC|GMT|[+-]\d{2}(:?\d{2})?)$"
_NUMBER_RE = r"^\s*[+-]?\d+(\.\d+)?([eE][+-]?\d+)?\s*$"
_EPOCH_DIVISOR = {"s": 1, "ms": 1_000, "us": 1_000_000}
_MAX_EPOCH_SECONDS = 1e11  # year 5138: anything larger is almost surely not seconds


class JoinError(Exception):
    """The join cannot be done as asked; the message says why and what to change."""


@dataclass(frozen=True)
class LogColumns:
    """Names of the training log's columns the join needs (configurable per log)."""

    step: str = "step"
    time: str = "time"
    checkpoint: str = "checkpoint"
    metric: str | None = "loss"


@dataclass(frozen=True)
class JoinSpec:
    mode: Mode
    log: Path
    columns: LogColumns = LogColumns()
    log_format: str | None = None  # inferred from the file suffix when None
    episode_key: str = "model_component_id"
    episode_time: EpisodeTime = "started_at"
    log_timezone: str | None = None
    epoch_unit: str = "s"
    # as-of only: (episode column, log column) that must be equal, e.g. each actor
    # follows its own training run: ("model_component_id", "run")
    asof_match: tuple[str, str] | None = None


@dataclass
class JoinResult:
    """Counts of the join and, for the episodes left out, why."""

    mode: Mode
    episodes: int
    matched: int
    unmatched: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    group_column: str = ""  # the joined column the aggregate groups by
    log_columns: list[str] = field(default_factory=list)

    def summary(self) -> str:
        text = f"{self.matched} of {self.episodes} episodes matched a training-log row"
        why = "; ".join(f"{n} {reason}" for reason, n in self.unmatched.items() if n)
        if why:
            text += f" ({why})"
        return text


def q(name: str) -> str:
    """A quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


# --------------------------------------------------------------------------- connection


def connect(sink: str, *, writable: bool = False) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB with the store attached as `store`.

    DuckDB stores are attached directly (read-only unless a table is to be
    written). PostgreSQL stores go through DuckDB's `postgres` extension when it
    is installed (it is never fetched at run time); without it, the episodes are
    copied out of PostgreSQL into the in-memory DuckDB (`join_postgres`).
    """
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    if is_postgres(sink):
        try:
            # Never fetch at run time: only an extension installed beforehand is used.
            con.execute("SET autoinstall_known_extensions = false")
            con.execute("LOAD postgres")
        except duckdb.Error:
            from rlmesh_stream.consumers.analysis.join_postgres import attach_episodes

            attach_episodes(con, sink)
            return con
        options = "TYPE postgres" + ("" if writable else ", READ_ONLY")
        con.execute(f"ATTACH '{sql_str(sink)}' AS store ({options})")
        return con
    path = duckdb_path(sink)
    if not path.exists():
        raise StoreError(f"no DuckDB store at {path} (has `rlmesh-stream consume` run?)")
    options = "" if writable else " (READ_ONLY)"
    try:
        con.execute(f"ATTACH '{sql_str(str(path))}' AS store{options}")
    except duckdb.Error as exc:
        raise StoreError(duckdb_open_message(path, exc, writing=writable)) from exc
    return con


def sql_str(text: str) -> str:
    """`text` for inside a single-quoted SQL string literal."""
    return text.replace("'", "''")


# --------------------------------------------------------------------------- training log


def log_format_of(path: Path, log_format: str | None) -> str:
    if log_format:
        if log_format not in LOG_FORMATS:
            raise JoinError(f"unknown log format {log_format!r}; use one of {LOG_FORMATS}")
        return log_format
    suffix = path.suffix.lower()
    for fmt, suffixes in {"jsonl": (".jsonl", ".json", ".ndjson"), "csv": (".csv", ".tsv"),
                          "parquet": (".parquet", ".pq")}.items():
        if suffix in suffixes:
            return fmt
    raise JoinError(f"cannot tell the format of {path.name} from its suffix; "
                    f"pass --log-format ({'|'.join(LOG_FORMATS)})")


def _reader(path: Path, fmt: str, types: dict[str, str] | None = None) -> str:
    """The DuckDB table function reading the log, with `types` overriding detection."""
    p = sql_str(str(path))
    if fmt == "parquet":
        return f"read_parquet('{p}')"
    if fmt == "csv":
        extra = ""
        if types:
            extra = ", types={" + ", ".join(f"'{sql_str(k)}': '{v}'"
                                            for k, v in types.items()) + "}"
        return f"read_csv('{p}', header=true{extra})"
    if types:
        cols = ", ".join(f"'{sql_str(k)}': '{v}'" for k, v in types.items())
        return f"read_json('{p}', format='auto', columns={{{cols}}})"
    return f"read_json('{p}', format='auto')"


def _describe(con: duckdb.DuckDBPyConnection, relation: str) -> dict[str, str]:
    return {row[0]: row[1] for row in con.execute(f"DESCRIBE SELECT * FROM {relation}").fetchall()}


def load_training_log(con: duckdb.DuckDBPyConnection, spec: JoinSpec) -> list[str]:
    """Read the log (JSON lines or array, CSV, Parquet) into temp table `training_log`.

    Adds `_row` (1-based position, for error messages) and `_train_at` (the row's
    instant, as-of joins only).

    Returns the log's own column names. Text timestamps are read as text (not
    left to the reader's detection) so that every row is checked the same way.
    """
    path = spec.log
    if not path.exists():
        raise JoinError(f"training log {path} does not exist")
    fmt = log_format_of(path, spec.log_format)
    try:
        detected = _describe(con, _reader(path, fmt))
    except duckdb.Error as exc:
        raise JoinError(f"cannot read {path} as {fmt}: {exc}") from exc
    cols = spec.columns
    needed = {"step": cols.step}
    if spec.mode == "asof":
        needed["time"] = cols.time
    else:
        needed["checkpoint"] = cols.checkpoint
    if cols.metric:
        needed["metric"] = cols.metric
    if spec.mode == "asof" and spec.asof_match is not None:
        needed["match"] = spec.asof_match[1]
    missing = [(role, name) for role, name in needed.items() if name not in detected]
    if missing:
        flags = {"metric": "--metric", "match": "--match"}
        what = ", ".join(f"{role} column {name!r} ({flags.get(role, f'--{role}-column')})"
                         for role, name in missing)
        raise JoinError(f"training log {path.name} has no {what}; "
                        f"its columns are: {', '.join(detected)}")
    # Only the as-of join reads the time column; a key join passes it through untouched.
    has_time = spec.mode == "asof"
    relation = _reader(path, fmt)
    if has_time and fmt != "parquet" and _is_texty(detected[cols.time]):
        types = dict(detected)
        types[cols.time] = "VARCHAR"
        relation = _reader(path, fmt, types if fmt == "jsonl" else {cols.time: "VARCHAR"})
    con.execute(f"CREATE OR REPLACE TEMP TABLE training_log_raw AS "
                f"SELECT *, row_number() OVER () AS _row FROM {relation}")
    time_type = _describe(con, "training_log_raw")[cols.time] if has_time else None
    at_sql = _time_sql(con, spec, time_type) if has_time else "NULL::TIMESTAMPTZ"
    con.execute(f"CREATE OR REPLACE TEMP TABLE training_log AS "
                f"SELECT *, {at_sql} AS _train_at FROM training_log_raw")
    if con.execute("SELECT COUNT(*) FROM training_log").fetchone() == (0,):
        raise JoinError(f"training log {path.name} has no rows")
    return list(detected)


def _position(spec: JoinSpec, row: int) -> str:
    """Where data row `row` (1-based) is in the log file, as its reader would look for it."""
    fmt = log_format_of(spec.log, spec.log_format)
    if fmt == "csv":
        return f"line {row + 1}"  # below the header line
    if fmt == "jsonl" and spec.log.suffix.lower() in (".jsonl", ".ndjson"):
        return f"line {row}"  # one object per line
    return f"row {row}"


def _is_texty(type_name: str) -> bool:
    return type_name in ("VARCHAR", "DATE", "TIME") or type_name.startswith("TIMESTAMP")


def _time_sql(con: duckdb.DuckDBPyConnection, spec: JoinSpec, type_name: str | None) -> str:
    """The SQL expression giving each log row's instant; raises JoinError on bad rows."""
    col = q(spec.columns.time)
    tz = spec.log_timezone
    if tz is not None:
        try:
            con.execute("SELECT timezone(?, TIMESTAMP '2000-01-01')", [tz])
        except duckdb.Error as exc:
            raise JoinError(f"unknown time zone {tz!r} (--log-timezone): {exc}") from exc
    assert type_name is not None
    if type_name == "TIMESTAMP WITH TIME ZONE":
        return col
    if type_name.startswith("TIMESTAMP") or type_name == "DATE":
        if tz is None:
            raise JoinError(
                f"time column {spec.columns.time!r} holds timestamps without a time zone "
                f"({type_name}): they are ambiguous. Pass --log-timezone (e.g. UTC) to say "
                "which zone the log was written in.")
        return _local_sql(con, spec, f"CAST({col} AS TIMESTAMP)", tz)
    if type_name != "VARCHAR":
        return _epoch_sql(con, spec, col)
    return _text_time_sql(con, spec, col, tz)


def _epoch_sql(con: duckdb.DuckDBPyConnection, spec: JoinSpec, col: str) -> str:
    """Numbers are Unix epoch times in `spec.epoch_unit`; refuse a unit that cannot be."""
    divisor = _EPOCH_DIVISOR.get(spec.epoch_unit)
    if divisor is None:
        raise JoinError(f"unknown epoch unit {spec.epoch_unit!r}; use s, ms or us")
    try:
        biggest = con.execute(
            f"SELECT MAX(ABS(TRY_CAST({col} AS DOUBLE))) FROM training_log_raw").fetchone()
    except duckdb.Error as exc:
        raise JoinError(f"time column {spec.columns.time!r} is neither a timestamp nor "
                        f"a number: {exc}") from exc
    infinite = con.execute(
        f"SELECT COUNT(*), MIN(_row), arg_min({col}, _row) FROM training_log_raw "
        f"WHERE NOT isfinite(TRY_CAST({col} AS DOUBLE))").fetchone()
    if infinite and infinite[0]:
        raise JoinError(
            f"{infinite[0]} time(s) in column {spec.columns.time!r} are not finite numbers "
            f"(first: {_position(spec, infinite[1])}, {infinite[2]!r}): a time must be a "
            "finite epoch or a timestamp")
    if biggest and biggest[0] is not None and biggest[0] / divisor > _MAX_EPOCH_SECONDS:
        raise JoinError(
            f"time column {spec.columns.time!r} holds numbers up to {biggest[0]:.0f}, too "
            f"large for epoch {spec.epoch_unit}: pass --epoch-unit ms (or us)")
    return f"to_timestamp(TRY_CAST({col} AS DOUBLE) / {divisor})"


def _text_time_sql(con: duckdb.DuckDBPyConnection, spec: JoinSpec, col: str,
                   tz: str | None) -> str:
    """Text timestamps: with an offset, as numbers (epoch), or local time in `tz`."""
    text = f"trim({col})"
    has_offset = f"regexp_matches({text}, '{_OFFSET_RE}')"
    is_number = f"regexp_matches({text}, '{_NUMBER_RE}')"
    epoch = _epoch_sql(con, spec, f"CASE WHEN {is_number} THEN {text} END")
    local = (_local_sql(con, spec, f"TRY_CAST({text} AS TIMESTAMP)", tz,
                        applies=f"{col} IS NOT NULL AND NOT {is_number} AND NOT {has_offset}")
             if tz is not None else "NULL::TIMESTAMPTZ")
    expr = (f"CASE WHEN {col} IS NULL THEN NULL "
            f"WHEN {is_number} THEN {epoch} "
            f"WHEN {has_offset} THEN TRY_CAST({text} AS TIMESTAMPTZ) "
            f"ELSE {local} END")
    name = spec.columns.time
    if tz is None:
        naive = con.execute(
            f"SELECT COUNT(*), MIN(_row), arg_min({col}, _row) FROM training_log_raw "
            f"WHERE {col} IS NOT NULL AND NOT {is_number} AND NOT {has_offset} "
            f"AND TRY_CAST({text} AS TIMESTAMP) IS NOT NULL").fetchone()
        if naive and naive[0]:
            raise JoinError(
                f"{naive[0]} timestamp(s) in column {name!r} have no UTC offset (first: "
                f"{_position(spec, naive[1])}, {naive[2]!r}), so they are ambiguous. Write "
                "them with an offset (e.g. 2026-03-01T12:00:00Z) or pass --log-timezone to "
                "name the zone the log was written in.")
    bad = con.execute(
        f"SELECT COUNT(*), list(_row ORDER BY _row)[1:3], list({col} ORDER BY _row)[1:3] "
        f"FROM training_log_raw WHERE {col} IS NOT NULL AND ({expr}) IS NULL").fetchone()
    if bad and bad[0]:
        examples = ", ".join(f"{_position(spec, r)}: {v!r}"
                             for r, v in zip(bad[1], bad[2], strict=True))
        raise JoinError(f"{bad[0]} timestamp(s) in column {name!r} cannot be parsed "
                        f"({examples}); use ISO 8601 with an offset, or epoch seconds")
    return expr


def _local_sql(con: duckdb.DuckDBPyConnection, spec: JoinSpec, naive: str, tz: str,
               applies: str = "TRUE") -> str:
    """Local wall-clock time in zone `tz` -> instant, refusing DST-ambiguous or missing times.

    A local time t has an instant u with local(u) = t; the two candidates use the
    zone's UTC offset 12 hours either side of t. Both valid and different: t
    happened twice (clocks went back). Neither valid: t never happened (clocks
    went forward). `applies` selects the rows that are local times (not those
    written with an offset), so only they are checked.
    """
    z = f"'{sql_str(tz)}'"
    x = f"timezone('UTC', {naive})"

    def off(at: str) -> str:
        return f"(timezone({z}, {at}) - timezone('UTC', {at}))"

    u1 = f"({x} - {off(f'{x} - INTERVAL 12 HOUR')})"
    u2 = f"({x} - {off(f'{x} + INTERVAL 12 HOUR')})"
    ok1 = f"(timezone({z}, {u1}) = {naive})"
    ok2 = f"(timezone({z}, {u2}) = {naive})"
    name = spec.columns.time
    col = q(name)
    for label, cond in (("ambiguous (they happened twice, when clocks went back)",
                         f"{ok1} AND {ok2} AND {u1} <> {u2}"),
                        ("nonexistent (skipped when clocks went forward)",
                         f"NOT {ok1} AND NOT {ok2}")):
        found = con.execute(
            f"SELECT COUNT(*), MIN(_row), arg_min({col}, _row) FROM training_log_raw "
            f"WHERE {applies} AND {naive} IS NOT NULL AND {cond}").fetchone()
        if found and found[0]:
            raise JoinError(
                f"{found[0]} local time(s) in column {name!r} are {label} in {tz} (first: "
                f"{_position(spec, found[1])}, {str(found[2])!r}); write the log with UTC "
                "offsets")
    return f"CASE WHEN {ok1} THEN {u1} ELSE {u2} END"


# --------------------------------------------------------------------------- join


def run_join(con: duckdb.DuckDBPyConnection, spec: JoinSpec) -> JoinResult:
    """Build temp table `joined` (matched episodes + `train_*` columns) and explain the rest."""
    episode_cols = _describe(con, "store.episodes") if _has_episodes(con) else {}
    if not episode_cols:
        raise JoinError("the store has no `episodes` table yet (has `rlmesh-stream consume` "
                        "run with the episodes builder?)")
    wanted: list[str] = [spec.episode_key if spec.mode == "key" else spec.episode_time]
    if spec.mode == "asof" and spec.asof_match is not None:
        wanted.append(spec.asof_match[0])
    for name in wanted:
        if name not in episode_cols:
            raise JoinError(f"episodes have no column {name!r}; "
                            f"they have: {', '.join(episode_cols)}")
    log_cols = load_training_log(con, spec)
    total = _scalar(con, "SELECT COUNT(*) FROM store.episodes")
    if total == 0:
        raise JoinError("the store has no episodes to join")
    train_select = ", ".join(
        f"l.{q('_train_at') if c == spec.columns.time and spec.mode == 'asof' else q(c)} "
        f"AS {q(TRAIN_PREFIX + c)}" for c in log_cols)
    if spec.mode == "key":
        result = _key_join(con, spec, train_select, total)
    else:
        result = _asof_join(con, spec, train_select, total)
    result.log_columns = log_cols
    if result.matched == 0:
        raise JoinError("no episode matched the training log: " + result.summary()
                        + "".join(f". {n}" for n in result.notes))
    return result


def _has_episodes(con: duckdb.DuckDBPyConnection) -> bool:
    return _scalar(con, "SELECT COUNT(*) FROM information_schema.tables "
                        "WHERE table_catalog = 'store' AND table_name = 'episodes'") > 0


def _scalar(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any] | None = None) -> Any:
    row = con.execute(sql, params or []).fetchone()
    return row[0] if row else None


def _key_join(con: duckdb.DuckDBPyConnection, spec: JoinSpec, train_select: str,
              total: int) -> JoinResult:
    ck, step, key = q(spec.columns.checkpoint), q(spec.columns.step), q(spec.episode_key)
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE checkpoint_rows AS
        SELECT * FROM training_log WHERE {ck} IS NOT NULL
        QUALIFY row_number() OVER (PARTITION BY CAST({ck} AS VARCHAR)
                                   ORDER BY {step} NULLS LAST, _row) = 1""")
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE joined AS
        SELECT e.*, {train_select}
        FROM store.episodes e
        JOIN checkpoint_rows l ON CAST(e.{key} AS VARCHAR) = CAST(l.{ck} AS VARCHAR)""")
    matched = _scalar(con, "SELECT COUNT(*) FROM joined")
    no_key = _scalar(con, f"SELECT COUNT(*) FROM store.episodes WHERE {key} IS NULL")
    result = JoinResult("key", total, matched, group_column=TRAIN_PREFIX + spec.columns.checkpoint)
    result.unmatched = {f"have no {spec.episode_key}": no_key,
                        f"have a {spec.episode_key} that is not in the log's "
                        f"{spec.columns.checkpoint!r} column": total - matched - no_key}
    if total - matched - no_key:
        missing = [r[0] for r in con.execute(f"""
            SELECT DISTINCT CAST({key} AS VARCHAR) AS k FROM store.episodes
            WHERE {key} IS NOT NULL AND CAST({key} AS VARCHAR) NOT IN
                (SELECT CAST({ck} AS VARCHAR) FROM checkpoint_rows) ORDER BY k LIMIT 5
            """).fetchall()]
        known = [r[0] for r in con.execute(
            f"SELECT CAST({ck} AS VARCHAR) FROM checkpoint_rows ORDER BY {step} LIMIT 5"
        ).fetchall()]
        result.notes.append(f"unmatched {spec.episode_key} values include {missing}; "
                            f"the log's checkpoints include {known}")
    repeated = _scalar(con, f"SELECT COUNT(*) - COUNT(DISTINCT CAST({ck} AS VARCHAR)) "
                            f"FROM training_log WHERE {ck} IS NOT NULL")
    if repeated:
        result.notes.append(f"{repeated} log rows repeat a checkpoint; each checkpoint is "
                            "joined to its first row (lowest step)")
    return result


def _asof_join(con: duckdb.DuckDBPyConnection, spec: JoinSpec, train_select: str,
               total: int) -> JoinResult:
    et, step = q(spec.episode_time), q(spec.columns.step)
    # With `asof_match`, each episode only looks at the log rows of its own run
    # (an equality condition of the ASOF join): the timeline is per match key.
    match_e = match_l = ""
    partition = "_train_at"
    if spec.asof_match is not None:
        match_e = f"CAST(e.{q(spec.asof_match[0])} AS VARCHAR)"
        match_l = f"CAST(l.{q(spec.asof_match[1])} AS VARCHAR)"
        partition = f"CAST({q(spec.asof_match[1])} AS VARCHAR), _train_at"
    # One row per instant (and key): two log rows at the same time would make the
    # match arbitrary.
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE timeline AS
        SELECT * FROM training_log WHERE _train_at IS NOT NULL
        QUALIFY row_number() OVER (PARTITION BY {partition}
                                   ORDER BY {step} DESC NULLS LAST, _row DESC) = 1""")
    on = f"{match_e} = {match_l} AND " if match_e else ""
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE joined AS
        SELECT e.*, {train_select}
        FROM store.episodes e
        ASOF JOIN timeline l ON {on}e.{et} >= l._train_at""")
    matched = _scalar(con, "SELECT COUNT(*) FROM joined")
    first = _scalar(con, "SELECT MIN(_train_at) FROM timeline")
    no_time = _scalar(con, f"SELECT COUNT(*) FROM store.episodes WHERE {et} IS NULL")
    group = (TRAIN_PREFIX + spec.columns.checkpoint
             if spec.columns.checkpoint in _describe(con, "training_log")
             else TRAIN_PREFIX + spec.columns.step)
    result = JoinResult("asof", total, matched, group_column=group)
    why_no_time = ("not completed yet" if spec.episode_time == "completed_at"
                   else "whose start was never seen")
    result.unmatched = {f"have no {spec.episode_time} ({why_no_time})": no_time}
    early = total - matched - no_time
    if spec.asof_match is not None:
        e_col, l_col = spec.asof_match
        unknown = _scalar(con, f"""
            SELECT COUNT(*) FROM store.episodes e WHERE e.{et} IS NOT NULL AND
                ({match_e} IS NULL OR {match_e} NOT IN (SELECT {match_l} FROM timeline l))""")
        result.unmatched[f"have a {e_col} that is not in the log's {l_col!r} column"] = unknown
        early -= unknown
        result.unmatched[f"{spec.episode_time.removesuffix('_at')} before the first "
                         f"training-log row of their {l_col}"] = early
    else:
        result.unmatched[f"{spec.episode_time.removesuffix('_at')} before the first "
                         f"training-log row ({first})"] = early
    dropped = _scalar(con, "SELECT COUNT(*) FROM training_log WHERE _train_at IS NULL")
    if dropped:
        result.notes.append(f"{dropped} log rows without a time were left out")
    same_time = _scalar(con, "SELECT (SELECT COUNT(*) FROM training_log "
                             "WHERE _train_at IS NOT NULL) - COUNT(*) FROM timeline")
    if same_time:
        result.notes.append(f"{same_time} log rows share a time with another; "
                            "the one with the highest step was kept")
    return result


# --------------------------------------------------------------------------- outputs


def aggregate(con: duckdb.DuckDBPyConnection, spec: JoinSpec,
              result: JoinResult) -> list[dict[str, Any]]:
    """Per checkpoint (or per training step, for a log without checkpoints):
    episodes, success rate, reward mean and spread, mean step time, and the
    training step and metric of the checkpoint's first log row."""
    g = q(result.group_column)
    step = q(TRAIN_PREFIX + spec.columns.step)
    metric = (f"arg_min({q(TRAIN_PREFIX + spec.columns.metric)}, {step})"
              if spec.columns.metric else "NULL")
    cur = con.execute(f"""
        SELECT CAST({g} AS VARCHAR) AS checkpoint,
               MIN({step}) AS step,
               {metric} AS metric,
               COUNT(*) AS episodes,
               COUNT(*) FILTER (WHERE status = 'completed') AS completed,
               AVG(CASE WHEN success THEN 1.0 ELSE 0.0 END)
                   FILTER (WHERE status = 'completed' AND success IS NOT NULL) AS success_rate,
               AVG(cumulative_reward) FILTER (WHERE status = 'completed') AS mean_reward,
               STDDEV_SAMP(cumulative_reward) FILTER (WHERE status = 'completed')
                   AS std_reward,
               AVG(step_ms) FILTER (WHERE status = 'completed') AS mean_step_ms
        FROM joined GROUP BY {g} ORDER BY step NULLS LAST, checkpoint""")
    names = [d[0] for d in cur.description or []]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def write_table(con: duckdb.DuckDBPyConnection, name: str, sink: str | None = None) -> None:
    """Replace `store.<name>` with the joined rows (in PostgreSQL itself for a copied store)."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise JoinError(f"table name {name!r} must be a plain SQL identifier")
    if name in ("episodes", "sessions", "advisories"):
        raise JoinError(f"refusing to overwrite the consumers' table {name!r}")
    if sink is not None and is_postgres(sink) and _store_is_a_copy(con):
        from rlmesh_stream.consumers.analysis.join_postgres import write_back

        write_back(con, sink, name)
        return
    con.execute(f"CREATE OR REPLACE TABLE store.{q(name)} AS SELECT * FROM joined")


def _store_is_a_copy(con: duckdb.DuckDBPyConnection) -> bool:
    """True when `store` is the in-memory copy of a PostgreSQL store, not the store itself."""
    return _scalar(con, "SELECT path IS NULL AND type = 'duckdb' FROM duckdb_databases() "
                        "WHERE database_name = 'store'") is True


def export(con: duckdb.DuckDBPyConnection, path: Path) -> None:
    """COPY the joined rows to CSV or Parquet, chosen by the file suffix."""
    suffix = path.suffix.lower()
    if suffix == ".csv":
        fmt = "FORMAT csv, HEADER true"
    elif suffix in (".parquet", ".pq"):
        fmt = "FORMAT parquet"
    else:
        raise JoinError(f"cannot export to {path.name}: use a .csv or .parquet file")
    con.execute(f"COPY (SELECT * FROM joined ORDER BY session_id, episode_record_id) "
                f"TO '{sql_str(str(path))}' ({fmt})")

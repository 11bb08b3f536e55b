"""Join episodes with a training log, inside DuckDB.

An eval number is read against training: which checkpoint, at which training
step, with what loss. A training log (JSONL, CSV or Parquet, typically one row
per step: a step, a wall-clock time, a checkpoint id, metrics; or a TensorBoard
log directory or MLflow run, read into such rows by `training_logs`) is joined
to the `episodes` table in one of two ways:

- `key`: an episode's `model_component_id` (configurable) equals the log's
  checkpoint column. A checkpoint's row is the *first* log row naming it (the
  step at which it was saved), so logs that repeat the current checkpoint on
  every step still give one row per checkpoint. Step-indexed logs (TensorBoard,
  MLflow) name no checkpoint: `checkpoint_step`, a regex, takes the training
  step from the episode's key (`ckpt-([0-9]+)`), and the checkpoint's row is the
  latest log row at or before that step that has the metric.
- `asof`: each episode gets the latest log row at or before its `started_at`
  (or `completed_at`): the policy version that was live when it ran, for actors
  that follow a moving checkpoint. This is DuckDB's ASOF join.

Everything runs as SQL in an in-memory DuckDB that attaches the store, so the
work is the database's joins, never a Python loop over rows. Timestamps are
normalised to instants first; a timestamp without a UTC offset is ambiguous
and refused unless the caller names the log's time zone, and with a zone named,
local times that a DST change makes ambiguous or nonexistent are refused too.

Size (over 500 lines, on purpose): every step (attach the store, read the log, turn
its times into instants, join, aggregate, write) is SQL over one DuckDB connection and
the temp tables the steps before it made (`training_log`, `joined`); the time rules
are most of the length, and their refusals are the join's user-facing errors.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import duckdb

from rlmesh_stream.consumers.analysis.sql import q, sql_str
from rlmesh_stream.consumers.sinks.url import SinkError, SinkURL, as_sink_url, attach_duckdb
from rlmesh_stream.consumers.tables import EPISODES, is_consumers_own

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
    log: Path | None  # None: the log is the MLflow run(s) below
    columns: LogColumns = LogColumns()
    log_format: str | None = None  # inferred from the file suffix when None
    episode_key: str = "model_component_id"
    episode_time: EpisodeTime = "started_at"
    log_timezone: str | None = None
    epoch_unit: str = "s"
    # as-of only: (episode column, log column) that must be equal, e.g. each actor
    # follows its own training run: ("model_component_id", "run")
    asof_match: tuple[str, str] | None = None
    # key only: a regex whose first group (or group named `step`) is the training step
    # in the episode key, for logs indexed by step rather than by checkpoint name
    checkpoint_step: str | None = None
    mlflow_runs: tuple[str, ...] = ()
    mlflow_tracking_uri: str | None = None

    @property
    def log_name(self) -> str:
        """How messages name the log."""
        if self.log is not None:
            return self.log.name
        return "MLflow run " + ", ".join(self.mlflow_runs)


@dataclass
class JoinResult:
    """Counts of the join and, for the episodes left out, why."""

    mode: Mode
    episodes: int
    matched: int
    unmatched: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    group_column: str = ""  # the joined column the aggregate groups by
    step_column: str = ""  # the joined column with each checkpoint's training step
    group_run: str = ""  # with a step group: the joined run column that also tells them apart
    log_columns: list[str] = field(default_factory=list)

    def summary(self) -> str:
        text = f"{self.matched} of {self.episodes} episodes matched a training-log row"
        why = "; ".join(f"{n} {reason}" for reason, n in self.unmatched.items() if n)
        if why:
            text += f" ({why})"
        return text


# --------------------------------------------------------------------------- connection


def connect(sink: SinkURL | str, *, writable: bool = False) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB with the store attached as `store` (SinkError if it cannot be).

    DuckDB stores are attached directly (read-only unless a table is to be
    written). PostgreSQL stores go through DuckDB's `postgres` extension when it
    is installed (it is never fetched at run time); without it, the episodes are
    copied out of PostgreSQL into the in-memory DuckDB (`join_postgres`).
    """
    target = as_sink_url(sink)
    con = duckdb.connect()
    try:
        con.execute("SET TimeZone = 'UTC'")
        if target.path is not None:
            attach_duckdb(con, target.path, "store", read_only=not writable)
        elif _has_postgres_extension(con):
            options = "TYPE postgres" + ("" if writable else ", READ_ONLY")
            try:
                con.execute(f"ATTACH '{sql_str(target.url)}' AS store ({options})")
            except duckdb.Error as exc:
                reason = str(exc).splitlines()[0]
                raise SinkError(f"cannot attach {target.shown}: {reason}") from exc
        else:
            from rlmesh_stream.consumers.analysis.join_postgres import attach_episodes

            attach_episodes(con, target.url)
    except BaseException:
        con.close()
        raise
    return con


def _has_postgres_extension(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether DuckDB's `postgres` extension is installed (never fetched at run time)."""
    try:
        con.execute("SET autoinstall_known_extensions = false")
        con.execute("LOAD postgres")
    except duckdb.Error:
        return False
    return True


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
    relation = _tool_log(con, spec)
    if relation is not None:
        fmt = "arrow"
        detected = _describe(con, relation)
    else:
        assert path is not None
        if not path.exists():
            raise JoinError(f"training log {path} does not exist")
        fmt = log_format_of(path, spec.log_format)
        try:
            detected = _describe(con, _reader(path, fmt))
        except duckdb.Error as exc:
            raise _unreadable(path, fmt, exc) from exc
        relation = _reader(path, fmt)
    cols = spec.columns
    needed = {"step": cols.step}
    if spec.mode == "asof":
        needed["time"] = cols.time
    elif spec.checkpoint_step is None:
        needed["checkpoint"] = cols.checkpoint
    if cols.metric:
        needed["metric"] = cols.metric
    if spec.asof_match is not None:
        needed["match"] = spec.asof_match[1]
    if spec.checkpoint_step and "run" in re.compile(spec.checkpoint_step).groupindex:
        needed["run"] = "run"
    missing = [(role, name) for role, name in needed.items() if name not in detected]
    if missing:
        flags = {"metric": "--metric", "match": "--match", "run": "--checkpoint-step"}
        what = ", ".join(f"{role} column {name!r} ({flags.get(role, f'--{role}-column')})"
                         for role, name in missing)
        hint = (" (a log indexed by training step: pass --checkpoint-step REGEX to read the "
                "step from the episode's checkpoint id)" if "checkpoint" in dict(missing) else "")
        raise JoinError(f"training log {spec.log_name} has no {what}; "
                        f"its columns are: {', '.join(detected)}{hint}")
    # Only the as-of join reads the time column; a key join passes it through untouched.
    has_time = spec.mode == "asof"
    if has_time and fmt in ("csv", "jsonl") and _is_texty(detected[cols.time]):
        assert path is not None
        types = dict(detected)
        types[cols.time] = "VARCHAR"
        relation = _reader(path, fmt, types if fmt == "jsonl" else {cols.time: "VARCHAR"})
    try:  # the whole file is read here (DESCRIBE samples its start)
        con.execute(f"CREATE OR REPLACE TEMP TABLE training_log_raw AS "
                    f"SELECT *, row_number() OVER () AS _row FROM {relation}")
    except duckdb.Error as exc:
        if path is None or fmt == "arrow":
            raise
        raise _unreadable(path, fmt, exc) from exc
    time_type = _describe(con, "training_log_raw")[cols.time] if has_time else None
    at_sql = _time_sql(con, spec, time_type) if has_time else "NULL::TIMESTAMPTZ"
    con.execute(f"CREATE OR REPLACE TEMP TABLE training_log AS "
                f"SELECT *, {at_sql} AS _train_at FROM training_log_raw")
    if con.execute("SELECT COUNT(*) FROM training_log").fetchone() == (0,):
        raise JoinError(f"training log {spec.log_name} has no rows")
    return list(detected)


def _unreadable(path: Path, fmt: str, exc: duckdb.Error) -> JoinError:
    """DuckDB's refusal of a log file as one line: its first, without the SQL it quotes."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    reason = lines[0] if lines else type(exc).__name__
    return JoinError(f"cannot read training log {path} as {fmt}: {reason}")


def _tool_log(con: duckdb.DuckDBPyConnection, spec: JoinSpec) -> str | None:
    """Register a TensorBoard log or MLflow run(s) as a relation; None for a file log."""
    from rlmesh_stream.consumers.analysis.training_logs import TrainingLogError
    from rlmesh_stream.consumers.analysis.training_logs.tensorboard import is_tensorboard_log

    log = spec.log
    is_tb = log is not None and spec.log_format is None and is_tensorboard_log(log)
    if not spec.mlflow_runs and not is_tb:
        return None
    try:
        if spec.mlflow_runs:
            from rlmesh_stream.consumers.analysis.training_logs.mlflow import read_mlflow

            table = read_mlflow(spec.mlflow_runs, spec.mlflow_tracking_uri)
        else:
            from rlmesh_stream.consumers.analysis.training_logs.tensorboard import (
                read_tensorboard,
            )

            assert log is not None
            table = read_tensorboard(log)
    except ImportError as exc:
        raise JoinError(f"reading {spec.log_name} needs {exc.name}: pip install "
                        "'rlmesh-stream[training-logs]'") from exc
    except TrainingLogError as exc:
        raise JoinError(str(exc)) from exc
    con.register("training_log_source", table)
    return "training_log_source"


def _offending_rows(con: duckdb.DuckDBPyConnection, col: str,
                    where: str) -> tuple[int, int, Any] | None:
    """(how many, first row, its value) of the log rows matching `where`; None if none."""
    found = con.execute(
        f"SELECT COUNT(*), MIN(_row), arg_min({col}, _row) FROM training_log_raw "
        f"WHERE {where}").fetchone()
    return (found[0], found[1], found[2]) if found and found[0] else None


def _position(spec: JoinSpec, row: int) -> str:
    """Where data row `row` (1-based) is in the log file, as its reader would look for it."""
    if spec.log is None or spec.log.is_dir() or spec.log.name.startswith("events.out.tfevents"):
        return f"row {row}"  # an MLflow run or a TensorBoard log: rows, not lines
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
    infinite = _offending_rows(con, col, f"NOT isfinite(TRY_CAST({col} AS DOUBLE))")
    if infinite:
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
        naive = _offending_rows(
            con, col, f"{col} IS NOT NULL AND NOT {is_number} AND NOT {has_offset} "
            f"AND TRY_CAST({text} AS TIMESTAMP) IS NOT NULL")
        if naive:
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
        found = _offending_rows(con, col, f"{applies} AND {naive} IS NOT NULL AND {cond}")
        if found:
            raise JoinError(
                f"{found[0]} local time(s) in column {name!r} are {label} in {tz} (first: "
                f"{_position(spec, found[1])}, {str(found[2])!r}); write the log with UTC "
                "offsets")
    return f"CASE WHEN {ok1} THEN {u1} ELSE {u2} END"


# --------------------------------------------------------------------------- join


def run_join(con: duckdb.DuckDBPyConnection, spec: JoinSpec) -> JoinResult:
    """Build temp table `joined` (matched episodes + `train_*` columns) and explain the rest."""
    episode_cols = _describe(con, f"store.{EPISODES.name}") if _has_episodes(con) else {}
    if not episode_cols:
        raise JoinError("the store has no `episodes` table yet (has `rlmesh-stream consume` "
                        "run with the episodes builder?)")
    wanted: list[str] = [spec.episode_key if spec.mode == "key" else spec.episode_time]
    if spec.asof_match is not None:
        wanted.append(spec.asof_match[0])
    if spec.mode == "key" and spec.asof_match is not None and spec.checkpoint_step is None:
        raise JoinError("--match applies to --by asof, or to --by key with --checkpoint-step")
    step_group = _step_group(spec, spec.checkpoint_step) if spec.checkpoint_step else 0
    for name in wanted:
        if name not in episode_cols:
            raise JoinError(f"episodes have no column {name!r}; "
                            f"they have: {', '.join(episode_cols)}")
    log_cols = load_training_log(con, spec)
    total = _scalar(con, f"SELECT COUNT(*) FROM store.{EPISODES.name}")
    if total == 0:
        raise JoinError("the store has no episodes to join")
    train_select = ", ".join(
        f"l.{q('_train_at') if c == spec.columns.time and spec.mode == 'asof' else q(c)} "
        f"AS {q(TRAIN_PREFIX + c)}" for c in log_cols)
    _refuse_mixed_runs(con, spec, log_cols)
    if spec.mode == "key" and step_group:
        result = _step_join(con, spec, train_select, total, step_group)
    elif spec.mode == "key":
        result = _key_join(con, spec, train_select, total)
    else:
        result = _asof_join(con, spec, train_select, total)
    result.log_columns = log_cols
    if result.matched == 0:
        raise JoinError("no episode matched the training log: " + result.summary()
                        + "".join(f". {n}" for n in result.notes))
    return result


def _step_group(spec: JoinSpec, pattern: str) -> int:
    """The number of the regex group holding the step: the one named `step`, else the first."""
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise JoinError(f"--checkpoint-step '{pattern}' is not a regular expression: "
                        f"{exc}") from exc
    if compiled.groups == 0:
        raise JoinError(f"--checkpoint-step '{pattern}' has no group: put the step's digits "
                        r"in parentheses, e.g. 'ckpt-(\d+)'")
    if "run" in compiled.groupindex and spec.asof_match is not None:
        raise JoinError("--checkpoint-step with a group named 'run' already matches each "
                        "episode to its run: drop --match")
    return compiled.groupindex.get("step", 1)


def _refuse_mixed_runs(con: duckdb.DuckDBPyConnection, spec: JoinSpec,
                       log_cols: list[str]) -> None:
    """Several TensorBoard or MLflow runs share one step axis: say which run (--match)."""
    if spec.asof_match is not None or "run" not in log_cols:
        return
    if spec.checkpoint_step and "run" in re.compile(spec.checkpoint_step).groupindex:
        return
    from rlmesh_stream.consumers.analysis.training_logs.tensorboard import is_tensorboard_log

    if not spec.mlflow_runs and not (spec.log is not None and spec.log_format is None
                                     and is_tensorboard_log(spec.log)):
        return
    runs = [r[0] for r in con.execute(
        "SELECT DISTINCT run FROM training_log ORDER BY 1 LIMIT 6").fetchall()]
    if len(runs) > 1:
        raise JoinError(
            f"training log {spec.log_name} holds several runs ({', '.join(runs[:5])}"
            f"{', ...' if len(runs) > 5 else ''}) on one step axis: pass --match "
            "EPISODE_COL=run to join each episode with its own run (or --log one run's "
            "directory)")


def _has_episodes(con: duckdb.DuckDBPyConnection) -> bool:
    return _scalar(con, "SELECT COUNT(*) FROM information_schema.tables "
                        "WHERE table_catalog = 'store' AND table_name = ?", [EPISODES.name]) > 0


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
        FROM store.{EPISODES.name} e
        JOIN checkpoint_rows l ON CAST(e.{key} AS VARCHAR) = CAST(l.{ck} AS VARCHAR)""")
    matched = _scalar(con, "SELECT COUNT(*) FROM joined")
    no_key = _scalar(con, f"SELECT COUNT(*) FROM store.{EPISODES.name} WHERE {key} IS NULL")
    result = JoinResult("key", total, matched, group_column=TRAIN_PREFIX + spec.columns.checkpoint)
    result.unmatched = {f"have no {spec.episode_key}": no_key,
                        f"have a {spec.episode_key} that is not in the log's "
                        f"{spec.columns.checkpoint!r} column": total - matched - no_key}
    if total - matched - no_key:
        missing = [r[0] for r in con.execute(f"""
            SELECT DISTINCT CAST({key} AS VARCHAR) AS k FROM store.{EPISODES.name}
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


def _step_join(con: duckdb.DuckDBPyConnection, spec: JoinSpec, train_select: str,
               total: int, group: int) -> JoinResult:
    """Key join for step-indexed logs: the step is read from the episode key by regex,
    and the checkpoint's row is the latest log row at or before it (that has the metric)."""
    assert spec.checkpoint_step is not None
    key, step = q(spec.episode_key), q(spec.columns.step)
    pattern = sql_str(spec.checkpoint_step)
    run_group = re.compile(spec.checkpoint_step).groupindex.get("run")
    run_sql = (f", NULLIF(regexp_extract(CAST({key} AS VARCHAR), '{pattern}', {run_group}), '') "
               "AS checkpoint_run" if run_group else "")
    try:
        con.execute(f"""
            CREATE OR REPLACE TEMP TABLE episode_steps AS
            SELECT *, TRY_CAST(NULLIF(regexp_extract(CAST({key} AS VARCHAR), '{pattern}',
                                                     {group}), '') AS BIGINT) AS checkpoint_step
                   {run_sql}
            FROM store.episodes""")
    except duckdb.Error as exc:
        raise JoinError(f"--checkpoint-step '{spec.checkpoint_step}' cannot be used: "
                        f"{exc}") from exc
    has_metric = f" AND {q(spec.columns.metric)} IS NOT NULL" if spec.columns.metric else ""
    match_e = match_l = on = ""
    partition = ""
    match = ("checkpoint_run", "run") if run_group else spec.asof_match
    if match is not None:
        match_e = f"CAST(e.{q(match[0])} AS VARCHAR)"
        match_l = f"CAST(l.{q(match[1])} AS VARCHAR)"
        on = f"{match_e} = {match_l} AND "
        partition = f"CAST({q(match[1])} AS VARCHAR), "
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE step_timeline AS
        SELECT * FROM training_log WHERE {step} IS NOT NULL{has_metric}
        QUALIFY row_number() OVER (PARTITION BY {partition}{step} ORDER BY _row DESC) = 1""")
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE joined AS
        SELECT e.*, {train_select}
        FROM episode_steps e
        ASOF JOIN step_timeline l ON {on}e.checkpoint_step >= l.{step}""")
    matched = _scalar(con, "SELECT COUNT(*) FROM joined")
    no_key = _scalar(con, f"SELECT COUNT(*) FROM episode_steps WHERE {key} IS NULL")
    no_step = _scalar(con, f"SELECT COUNT(*) FROM episode_steps "
                           f"WHERE {key} IS NOT NULL AND checkpoint_step IS NULL")
    result = JoinResult("key", total, matched, group_column=spec.episode_key,
                        step_column="checkpoint_step")
    result.unmatched = {f"have no {spec.episode_key}": no_key,
                        f"have a {spec.episode_key} that --checkpoint-step "
                        f"'{spec.checkpoint_step}' does not match": no_step}
    early = total - matched - no_key - no_step
    rows_with = f"log row with {spec.columns.metric!r}" if has_metric else "log row"
    if match is not None:
        e_col, l_col = match
        unknown = _scalar(con, f"""
            SELECT COUNT(*) FROM episode_steps e WHERE e.checkpoint_step IS NOT NULL AND
                ({match_e} IS NULL OR {match_e} NOT IN (SELECT {match_l} FROM step_timeline l))""")
        result.unmatched[f"have a {e_col} that is not in the log's {l_col!r} column"] = unknown
        early -= unknown
        result.unmatched[f"have a checkpoint step before the first {rows_with} of their "
                         f"{l_col}"] = early
    else:
        first = _scalar(con, f"SELECT MIN({step}) FROM step_timeline")
        result.unmatched[f"have a checkpoint step before the first {rows_with} "
                         f"(step {first})"] = early
    if no_step:
        examples = [r[0] for r in con.execute(
            f"SELECT DISTINCT CAST({key} AS VARCHAR) AS k FROM episode_steps WHERE "
            f"{key} IS NOT NULL AND checkpoint_step IS NULL ORDER BY k LIMIT 5").fetchall()]
        result.notes.append(f"{spec.episode_key} values that --checkpoint-step does not "
                            f"match include {examples}")
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
    # match arbitrary. A log without checkpoints (TensorBoard, MLflow: one row per step,
    # each metric logged at its own steps) offers only the rows that have the metric.
    has_metric = ""
    if spec.columns.metric and spec.columns.checkpoint not in _describe(con, "training_log"):
        has_metric = f" AND {q(spec.columns.metric)} IS NOT NULL"
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE timeline AS
        SELECT * FROM training_log WHERE _train_at IS NOT NULL{has_metric}
        QUALIFY row_number() OVER (PARTITION BY {partition}
                                   ORDER BY {step} DESC NULLS LAST, _row DESC) = 1""")
    on = f"{match_e} = {match_l} AND " if match_e else ""
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE joined AS
        SELECT e.*, {train_select}
        FROM store.{EPISODES.name} e
        ASOF JOIN timeline l ON {on}e.{et} >= l._train_at""")
    matched = _scalar(con, "SELECT COUNT(*) FROM joined")
    first = _scalar(con, "SELECT MIN(_train_at) FROM timeline")
    no_time = _scalar(con, f"SELECT COUNT(*) FROM store.{EPISODES.name} WHERE {et} IS NULL")
    group = (TRAIN_PREFIX + spec.columns.checkpoint
             if spec.columns.checkpoint in _describe(con, "training_log")
             else TRAIN_PREFIX + spec.columns.step)
    result = JoinResult("asof", total, matched, group_column=group)
    if group == TRAIN_PREFIX + spec.columns.step and spec.asof_match is not None:
        # runs share the step axis: a checkpoint is a run's step (ppo_1/3000)
        result.group_run = TRAIN_PREFIX + spec.asof_match[1]
    why_no_time = ("not completed yet" if spec.episode_time == "completed_at"
                   else "whose start was never seen")
    result.unmatched = {f"have no {spec.episode_time} ({why_no_time})": no_time}
    early = total - matched - no_time
    if spec.asof_match is not None:
        e_col, l_col = spec.asof_match
        unknown = _scalar(con, f"""
            SELECT COUNT(*) FROM store.{EPISODES.name} e WHERE e.{et} IS NOT NULL AND
                ({match_e} IS NULL OR {match_e} NOT IN (SELECT {match_l} FROM timeline l))""")
        result.unmatched[f"have a {e_col} that is not in the log's {l_col!r} column"] = unknown
        early -= unknown
        result.unmatched[f"{spec.episode_time.removesuffix('_at')} before the first "
                         f"training-log row of their {l_col}"] = early
    else:
        result.unmatched[f"{spec.episode_time.removesuffix('_at')} before the first "
                         f"training-log row ({first})"] = early
    without = (_scalar(con, f"SELECT COUNT(*) FROM training_log WHERE _train_at IS NOT NULL "
                            f"AND {q(spec.columns.metric or '')} IS NULL") if has_metric else 0)
    if without:
        result.notes.append(f"{without} log rows without {spec.columns.metric!r} were not "
                            "matched (a log without checkpoints is matched on its metric)")
    dropped = _scalar(con, "SELECT COUNT(*) FROM training_log WHERE _train_at IS NULL")
    if dropped:
        result.notes.append(f"{dropped} log rows without a time were left out")
    same_time = _scalar(con, f"SELECT (SELECT COUNT(*) FROM training_log "
                             f"WHERE _train_at IS NOT NULL{has_metric}) - COUNT(*) FROM timeline")
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
    label = f"CAST({g} AS VARCHAR)"
    groups = g
    if result.group_run:
        run = q(result.group_run)
        label = f"CAST({run} AS VARCHAR) || '/' || {label}"
        groups = f"{run}, {g}"
    step = q(result.step_column or TRAIN_PREFIX + spec.columns.step)
    metric = (f"arg_min({q(TRAIN_PREFIX + spec.columns.metric)}, {step})"
              if spec.columns.metric else "NULL")
    cur = con.execute(f"""
        SELECT {label} AS checkpoint,
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
        FROM joined GROUP BY {groups} ORDER BY step NULLS LAST, checkpoint""")
    names = [d[0] for d in cur.description or []]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def write_table(con: duckdb.DuckDBPyConnection, name: str,
                sink: SinkURL | str | None = None) -> None:
    """Replace `store.<name>` with the joined rows (in PostgreSQL itself for a copied store)."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise JoinError(f"table name {name!r} must be a plain SQL identifier")
    if is_consumers_own(name):
        raise JoinError(f"refusing to overwrite {name!r}: it is one of the consumers' own "
                        "tables or views (in any letter case); choose another --table name, "
                        "e.g. episodes_training")
    target = None if sink is None else as_sink_url(sink)
    if target is not None and target.is_postgres and _store_is_a_copy(con):
        from rlmesh_stream.consumers.analysis.join_postgres import write_back

        write_back(con, target.url, name)
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

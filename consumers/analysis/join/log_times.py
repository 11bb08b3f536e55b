"""A training log's times turned into instants, in SQL: timestamps with or without a
UTC offset, epoch numbers, local times in a named zone.

Why its own module: the time rules are the longest part of the join, and their refusals
(a timestamp without an offset and no `--log-timezone`, a local time a DST change makes
ambiguous or nonexistent, an epoch in the wrong unit) are its user-facing errors.
"""

from __future__ import annotations

from typing import Any

import duckdb

from rlmesh_stream.consumers.analysis.join.log_files import position_of
from rlmesh_stream.consumers.analysis.join.spec import JoinError, JoinSpec
from rlmesh_stream.consumers.analysis.sql import q, sql_str

_OFFSET_RE = r"\d{1,2}:\d{2}(:\d{2}(\.\d+)?)?\s*(Z|z|UTC|GMT|[+-]\d{2}(:?\d{2})?)$"
_NUMBER_RE = r"^\s*[+-]?\d+(\.\d+)?([eE][+-]?\d+)?\s*$"
_EPOCH_DIVISOR = {"s": 1, "ms": 1_000, "us": 1_000_000}
_MAX_EPOCH_SECONDS = 1e11  # year 5138: anything larger is almost surely not seconds


def _offending_rows(con: duckdb.DuckDBPyConnection, col: str,
                    where: str) -> tuple[int, int, Any] | None:
    """(how many, first row, its value) of the log rows matching `where`; None if none."""
    found = con.execute(
        f"SELECT COUNT(*), MIN(_row), arg_min({col}, _row) FROM training_log_raw "
        f"WHERE {where}").fetchone()
    return (found[0], found[1], found[2]) if found and found[0] else None


def time_sql(con: duckdb.DuckDBPyConnection, spec: JoinSpec, type_name: str | None) -> str:
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
            f"(first: {position_of(spec, infinite[1])}, {infinite[2]!r}): a time must be a "
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
                f"{position_of(spec, naive[1])}, {naive[2]!r}), so they are ambiguous. Write "
                "them with an offset (e.g. 2026-03-01T12:00:00Z) or pass --log-timezone to "
                "name the zone the log was written in.")
    bad = con.execute(
        f"SELECT COUNT(*), list(_row ORDER BY _row)[1:3], list({col} ORDER BY _row)[1:3] "
        f"FROM training_log_raw WHERE {col} IS NOT NULL AND ({expr}) IS NULL").fetchone()
    if bad and bad[0]:
        examples = ", ".join(f"{position_of(spec, r)}: {v!r}"
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
                f"{position_of(spec, found[1])}, {str(found[2])!r}); write the log with UTC "
                "offsets")
    return f"CASE WHEN {ok1} THEN {u1} ELSE {u2} END"

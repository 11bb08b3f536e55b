"""A training log file's format (by suffix or `--log-format`), the DuckDB reader of
each format, and how a refusal names the file and the line of a bad row."""

from __future__ import annotations

from pathlib import Path

import duckdb

from rlmesh_stream.consumers.analysis.join.spec import LOG_FORMATS, JoinError, JoinSpec
from rlmesh_stream.consumers.analysis.sql import sql_str


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


def log_reader(path: Path, fmt: str, types: dict[str, str] | None = None) -> str:
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


def unreadable(path: Path, fmt: str, exc: duckdb.Error) -> JoinError:
    """DuckDB's refusal of a log file as one line: its first, without the SQL it quotes."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    reason = lines[0] if lines else type(exc).__name__
    return JoinError(f"cannot read training log {path} as {fmt}: {reason}")


def position_of(spec: JoinSpec, row: int) -> str:
    """Where data row `row` (1-based) is in the log file, as its reader would look for it."""
    if spec.log is None or spec.log.is_dir() or spec.log.name.startswith("events.out.tfevents"):
        return f"row {row}"  # an MLflow run or a TensorBoard log: rows, not lines
    fmt = log_format_of(spec.log, spec.log_format)
    if fmt == "csv":
        return f"line {row + 1}"  # below the header line
    if fmt == "jsonl" and spec.log.suffix.lower() in (".jsonl", ".ndjson"):
        return f"line {row}"  # one object per line
    return f"row {row}"

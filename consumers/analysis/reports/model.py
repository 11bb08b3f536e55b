"""A report as data: the one shape every renderer (table, markdown, JSON, HTML) draws.

Keeping queries and presentation apart means each report is written once and
every output format shows the same rows in the same order.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
from dataclasses import dataclass, field
from typing import Any, Literal

Align = Literal["left", "right"]


@dataclass(frozen=True)
class Column:
    """One column: `key` in the row dicts, `label` shown to people."""

    key: str
    label: str
    align: Align = "left"
    kind: Literal["text", "int", "float", "percent", "time"] = "text"


@dataclass
class Report:
    """Rows plus what a reader needs to interpret them.

    `row_classes` tags rows for emphasis (e.g. "caution"), aligned with `rows`;
    `summary` is a few labelled figures shown above the table.
    """

    name: str
    title: str
    columns: list[Column]
    rows: list[dict[str, Any]]
    row_classes: list[str] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    empty_message: str = "No rows."

    def row_class(self, index: int) -> str:
        return self.row_classes[index] if index < len(self.row_classes) else ""


MISSING = "—"
"""A cell with no value (SQL NULL). A number that is not finite is another thing (a loss
that diverged to NaN is a result, not a gap) and is spelled out: see `non_finite`."""


def non_finite(value: Any) -> str | None:
    """"NaN", "Infinity" or "-Infinity" for a number that is one, else None.

    The text renderers show these words and the JSON renderer writes them as strings, since
    strict JSON (RFC 8259) has no NaN or Infinity; null always means missing.
    """
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else "Infinity" if value > 0 else "-Infinity"
    if isinstance(value, decimal.Decimal) and not value.is_finite():  # PostgreSQL NUMERIC
        return "NaN" if value.is_nan() else "Infinity" if value > 0 else "-Infinity"
    return None


def format_value(value: Any, kind: str) -> str:
    """Human text for a cell; the JSON renderer keeps raw values instead."""
    if value is None:
        return MISSING
    special = non_finite(value)
    if special is not None:
        return special
    if kind == "percent":
        return f"{100 * float(value):.1f}%"
    if kind == "float":
        return f"{float(value):.3f}" if abs(float(value)) < 1e6 else f"{float(value):.3g}"
    if kind == "int":
        return f"{int(value):,}"
    if kind == "time" or isinstance(value, dt.datetime):
        return format_time(value)
    return str(value)


def format_time(value: Any) -> str:
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC)
            return value.strftime("%Y-%m-%d %H:%M:%SZ")
        return value.strftime("%Y-%m-%d %H:%M:%S")
    return str(value)


def json_value(value: Any) -> Any:
    """A strict-JSON form of a cell: ISO-8601 instants, numbers for decimals, and the
    strings "NaN", "Infinity", "-Infinity" for numbers that are not finite (None stays null:
    missing)."""
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            return value.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")
        return value.isoformat()
    special = non_finite(value)
    if special is not None:
        return special
    if isinstance(value, decimal.Decimal):  # PostgreSQL's SUM/AVG are NUMERIC
        return int(value) if value == value.to_integral_value() else float(value)
    return value

"""Numbers that are not finite, in every report format: spelled out, never shown as missing,
and never written as JSON that strict parsers refuse."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest

from rlmesh_stream.consumers.analysis.reports import Column, Report, render

VALUES: list[Any] = [None, float("nan"), float("inf"), float("-inf"), Decimal("NaN"),
                     Decimal("-Infinity"), 0.5]
SHOWN = [None, "NaN", "Infinity", "-Infinity", "NaN", "-Infinity", 0.5]


def _report() -> Report:
    return Report("numbers", "Numbers", [Column("name", "Name"),
                                         Column("value", "Value", "right", "float")],
                  [{"name": f"row{i}", "value": v} for i, v in enumerate(VALUES)],
                  summary={"worst": float("nan")})


def _strict(text: str) -> Any:
    def refuse(name: str) -> Any:
        raise ValueError(f"not JSON: {name}")

    return json.loads(text, parse_constant=refuse)


def test_json_spells_non_finite_numbers_as_strings_and_missing_as_null() -> None:
    doc = _strict(render(_report(), "json"))
    assert [row["value"] for row in doc["rows"]] == SHOWN
    assert doc["summary"] == {"worst": "NaN"}


@pytest.mark.parametrize("fmt", ["table", "markdown", "html"])
def test_text_formats_tell_nan_from_missing(fmt: str) -> None:
    text = render(_report(), fmt)
    rows = text.split("<tr") if fmt == "html" else text.splitlines()
    for i, shown in enumerate(SHOWN):
        (row,) = [r for r in rows if f"row{i}" in r]
        expected = "—" if shown is None else "0.500" if shown == 0.5 else shown
        assert expected in row, (fmt, i, row)
        if shown is None:
            assert "NaN" not in row and "Infinity" not in row

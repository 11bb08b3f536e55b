"""`rlmesh-stream report delivery`: gaps and duplicates per producer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from rlmesh_stream.consumers.analysis.report_cli import report
from tests.analysis.analysis_stores import insert, make_store


@pytest.fixture
def sink(tmp_path: Path) -> str:
    path = tmp_path / "delivery.duckdb"
    con = make_store(path)
    insert(con, "delivery_sequences", [  # contiguous ranges of sequences, with their records
        # "clean": 0..3 once each
        {"producer_id": "clean", "first_seq": 0, "last_seq": 3, "records": 4},
        # "lossy": 0, 1, 4 (2 and 3 missing), 1 seen twice
        {"producer_id": "lossy", "first_seq": 0, "last_seq": 1, "records": 3},
        {"producer_id": "lossy", "first_seq": 4, "last_seq": 4, "records": 1},
    ])
    insert(con, "dead_letters", [{"topic": "t", "partition_id": 0, "record_offset": 7}])
    con.close()
    return f"duckdb://{path}"


def _doc(sink: str) -> dict:
    result = CliRunner().invoke(report, ["delivery", "--sink", sink, "--format", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_producers_with_problems_come_first(sink: str) -> None:
    assert [r["producer_id"] for r in _doc(sink)["rows"]] == ["lossy", "clean"]


def test_gaps_and_duplicates_per_producer(sink: str) -> None:
    lossy, clean = _doc(sink)["rows"]
    assert (lossy["records"], lossy["gaps"], lossy["duplicates"]) == (4, 2, 1)
    assert (clean["records"], clean["gaps"], clean["duplicates"]) == (4, 0, 0)


def test_summary_totals_missing_records_and_dead_letters(sink: str) -> None:
    summary = _doc(sink)["summary"]
    assert (summary["missing records"], summary["duplicate records"]) == (2, 1)
    assert summary["dead letters"] == 1


def test_html_marks_producers_with_gaps(sink: str) -> None:
    out = CliRunner().invoke(report, ["delivery", "--sink", sink, "--format", "html"]).stdout
    assert out.count('<tr class="caution">') == 1

"""`rlmesh-stream report advisories`: the fleet view of relay advisories."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from rlmesh_stream.consumers.analysis.report_cli import GATE_EXIT_CODE, report
from rlmesh_stream.consumers.analysis.reports import advisory_report, open_store
from tests.analysis.analysis_stores import advisory, at, insert, make_store

OBS_CLIP = "observation clipped to Box bounds"
OBS_FAKE = "missing observation key 'depth' filled with zeros"
ACT_CAST = "action cast float64 -> float32"


@pytest.fixture
def fleet(tmp_path: Path) -> str:
    """Two env/model pairs; CartPole/ppo has cautions on 3 sessions, info on 1."""
    path = tmp_path / "fleet.duckdb"
    con = make_store(path)
    insert(con, "advisories", [
        advisory("s1", "observation", "caution", OBS_FAKE, count=4,
                 first_seen=at(10), last_seen=at(40), model_component_id="ppo"),
        advisory("s2", "observation", "caution", OBS_FAKE, count=2,
                 first_seen=at(5), last_seen=at(20), model_component_id="ppo"),
        advisory("s3", "observation", "caution", OBS_CLIP, count=1,
                 first_seen=at(50), last_seen=at(90), model_component_id="ppo"),
        advisory("s1", "action", "info", ACT_CAST, count=7, model_component_id="ppo"),
        advisory("s9", "action", "info", ACT_CAST, count=1, env_id="Pendulum-v1",
                 model_component_id="sac"),
        advisory("s8", "action", "info", ACT_CAST, count=3, env_id="Pendulum-v1",
                 model_component_id="sac"),
    ])
    insert(con, "sessions", [{"session_id": s, "status": "ended"}
                             for s in ("s1", "s2", "s3", "s8", "s9", "s10")])
    con.close()
    return f"duckdb://{path}"


def _info_only(tmp_path: Path) -> str:
    path = tmp_path / "info.duckdb"
    con = make_store(path)
    insert(con, "advisories", [advisory("s1", "action", "info", ACT_CAST)])
    con.close()
    return f"duckdb://{path}"


def _groups(sink: str) -> list[dict]:
    with open_store(sink) as store:
        return advisory_report(store).rows


def test_caution_groups_come_before_info_groups(fleet: str) -> None:
    severities = [g["severity"] for g in _groups(fleet)]
    assert severities == ["caution", "info", "info"]


def test_a_group_is_one_env_model_and_leg(fleet: str) -> None:
    keys = [(g["env_id"], g["model_component_id"], g["leg"]) for g in _groups(fleet)]
    assert keys == [
        ("CartPole-v1", "ppo", "observation"),
        ("Pendulum-v1", "sac", "action"),  # 2 sessions: before the 1-session info group
        ("CartPole-v1", "ppo", "action"),
    ]


def test_sessions_affected_counts_distinct_sessions(fleet: str) -> None:
    caution = _groups(fleet)[0]
    assert caution["sessions"] == 3


def test_counts_add_up_and_seen_times_span_the_group(fleet: str) -> None:
    caution = _groups(fleet)[0]
    assert caution["occurrences"] == 4 + 2 + 1
    assert caution["messages"] == 2
    assert caution["first_seen"] == at(5)
    assert caution["last_seen"] == at(90)


def test_sample_message_is_the_most_frequent_one(fleet: str) -> None:
    assert _groups(fleet)[0]["sample_message"] == OBS_FAKE


def test_summary_counts_caution_sessions_against_the_fleet(fleet: str) -> None:
    with open_store(fleet) as store:
        summary = advisory_report(store).summary
    assert summary["sessions with caution"] == 3
    assert summary["sessions in store"] == 6


def test_fail_on_caution_exits_with_the_gate_status(fleet: str) -> None:
    result = CliRunner().invoke(report, ["advisories", "--sink", fleet, "--fail-on", "caution"])
    assert result.exit_code == GATE_EXIT_CODE
    assert "advisory gate: 1 advisory group(s) at 'caution'" in result.stderr


def test_fail_on_caution_passes_when_only_info_advisories(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        report, ["advisories", "--sink", _info_only(tmp_path), "--fail-on", "caution"])
    assert result.exit_code == 0, result.output


def test_fail_on_info_trips_on_info_advisories(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        report, ["advisories", "--sink", _info_only(tmp_path), "--fail-on", "info"])
    assert result.exit_code == GATE_EXIT_CODE


def test_report_is_printed_even_when_the_gate_trips(fleet: str) -> None:
    result = CliRunner().invoke(
        report, ["advisories", "--sink", fleet, "--fail-on", "info", "--format", "markdown"])
    assert OBS_FAKE in result.stdout


def test_table_format_shows_each_group(fleet: str) -> None:
    out = CliRunner().invoke(report, ["advisories", "--sink", fleet]).stdout
    assert out.count("CartPole-v1") == 2
    assert out.count("Pendulum-v1") == 1


def test_markdown_format_is_a_pipe_table_with_one_row_per_group(fleet: str) -> None:
    out = CliRunner().invoke(report, ["advisories", "--sink", fleet, "--format", "markdown"])
    rows = [line for line in out.stdout.splitlines() if line.startswith("| caution")
            or line.startswith("| info")]
    assert len(rows) == 3


def test_json_format_carries_raw_numbers_and_utc_iso_times(fleet: str) -> None:
    out = CliRunner().invoke(report, ["advisories", "--sink", fleet, "--format", "json"])
    doc = json.loads(out.stdout)
    first = doc["rows"][0]
    assert (first["severity"], first["sessions"], first["occurrences"]) == ("caution", 3, 7)
    assert first["first_seen"] == "2026-03-01T12:00:05Z"


def test_html_format_is_a_standalone_page(fleet: str, tmp_path: Path) -> None:
    target = tmp_path / "advisories.html"
    result = CliRunner().invoke(
        report, ["advisories", "--sink", fleet, "--format", "html", "--output", str(target)])
    assert result.exit_code == 0, result.output
    page = target.read_text()
    assert page.startswith("<!DOCTYPE html>")
    assert not re.search(r"(src|href)=\"(https?:)?//", page), "page loads an external asset"
    assert page.count('<tr class="caution">') == 1


def test_html_escapes_advisory_messages(tmp_path: Path) -> None:
    path = tmp_path / "x.duckdb"
    con = make_store(path)
    insert(con, "advisories", [advisory("s1", "action", "caution", "<script>x</script>")])
    con.close()
    out = CliRunner().invoke(
        report, ["advisories", "--sink", f"duckdb://{path}", "--format", "html"]).stdout
    assert "<script>x</script>" not in out
    assert "&lt;script&gt;x&lt;/script&gt;" in out


def test_a_store_without_advisories_says_there_are_none(tmp_path: Path) -> None:
    path = tmp_path / "empty.duckdb"
    make_store(path).close()
    result = CliRunner().invoke(report, ["advisories", "--sink", f"duckdb://{path}",
                                         "--fail-on", "info"])
    assert result.exit_code == 0
    assert "No advisories" in result.stdout


def test_a_missing_store_is_a_clear_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        report, ["advisories", "--sink", f"duckdb://{tmp_path}/nope.duckdb"])
    assert result.exit_code == 1
    assert "no DuckDB store at" in result.stderr


def test_the_default_store_is_rlmesh_duckdb_in_the_working_directory() -> None:
    from rlmesh_stream.consumers.sinks import DEFAULT_SINK

    assert f"duckdb://{Path.cwd() / 'rlmesh.duckdb'}" == DEFAULT_SINK


def test_model_filter_narrows_the_report_and_the_gate(fleet: str) -> None:
    result = CliRunner().invoke(report, ["advisories", "--sink", fleet, "--model", "sac",
                                         "--fail-on", "caution", "--format", "json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert [(r["model_component_id"], r["severity"]) for r in doc["rows"]] == [("sac", "info")]


def test_env_filter_keeps_only_that_envs_groups(fleet: str) -> None:
    with open_store(fleet) as store:
        rows = advisory_report(store, envs=["CartPole-v1"]).rows
    assert {r["env_id"] for r in rows} == {"CartPole-v1"}
    assert len(rows) == 2

"""`rlmesh-stream join`: episodes joined with hand-made training logs of known answer.

The timeline used throughout (seconds after T0 = 2026-03-01 12:00:00Z):

    log rows    t=0 step 100 c100 loss .9 | t=30 step 200 c200 loss .5 | t=45 step 300 c300 loss .3
    episodes    s/1 at t=10, s/2 at t=20, s/3 at t=35, s/4 at t=50  (and s/0 at t=-5 where noted)

so as of its start, episodes 1 and 2 ran c100, episode 3 c200, episode 4 c300.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from rlmesh_stream.consumers.analysis.join import (
    JoinError,
    JoinSpec,
    LogColumns,
    aggregate,
    connect,
    run_join,
)
from rlmesh_stream.consumers.analysis.join_cli import join
from rlmesh_stream.consumers.sinks import SinkError
from tests.analysis.analysis_stores import T0, at, episode, episodes_store

LOG = [
    {"step": 100, "time": "2026-03-01T12:00:00Z", "checkpoint": "c100", "loss": 0.9},
    {"step": 200, "time": "2026-03-01T12:00:30Z", "checkpoint": "c200", "loss": 0.5},
    {"step": 300, "time": "2026-03-01T12:00:45Z", "checkpoint": "c300", "loss": 0.3},
]


def write_log(path: Path, rows: list[dict[str, Any]]) -> Path:
    """Write `rows` as JSONL, CSV or Parquet, by the suffix of `path`."""
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif path.suffix == ".csv":
        cols = list(rows[0])
        lines = [",".join(cols)] + [",".join(str(r[c]) for c in cols) for r in rows]
        path.write_text("\n".join(lines) + "\n")
    else:
        pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def timeline_episodes(**extra: Any) -> list[dict[str, Any]]:
    starts = {1: 10, 2: 20, 3: 35, 4: 50}
    return [episode("s", i, started_at=at(t), completed_at=at(t + 1),
                    cumulative_reward=float(10 * i), **extra) for i, t in starts.items()]


def joined(sink: str, spec: JoinSpec) -> tuple[dict[str, str], Any]:
    """Run the join; map episode record id -> the checkpoint it was joined to."""
    con = connect(sink)
    try:
        result = run_join(con, spec)
        pairs = con.execute("SELECT episode_record_id, train_checkpoint FROM joined").fetchall()
    finally:
        con.close()
    return dict(pairs), result


# --------------------------------------------------------------------------- as of


def test_asof_join_gives_each_episode_the_latest_log_row_at_or_before_its_start(
        tmp_path: Path) -> None:
    sink = episodes_store(tmp_path, timeline_episodes())
    log = write_log(tmp_path / "log.jsonl", LOG)
    pairs, result = joined(sink, JoinSpec("asof", log))
    assert pairs == {"ep-000001": "c100", "ep-000002": "c100",
                     "ep-000003": "c200", "ep-000004": "c300"}
    assert (result.matched, result.episodes) == (4, 4)


def test_asof_join_counts_a_log_row_at_exactly_the_episode_start(tmp_path: Path) -> None:
    sink = episodes_store(tmp_path, [episode("s", 1, started_at=at(30))])
    pairs, _ = joined(sink, JoinSpec("asof", write_log(tmp_path / "log.jsonl", LOG)))
    assert pairs == {"ep-000001": "c200"}


def test_asof_join_on_completion_time(tmp_path: Path) -> None:
    # started under c100 at t=25, finished at t=31 under c200
    sink = episodes_store(tmp_path, [episode("s", 1, started_at=at(25), completed_at=at(31))])
    log = write_log(tmp_path / "log.jsonl", LOG)
    pairs, _ = joined(sink, JoinSpec("asof", log, episode_time="completed_at"))
    assert pairs == {"ep-000001": "c200"}


def test_episodes_before_the_first_log_row_are_left_out_and_counted(tmp_path: Path) -> None:
    sink = episodes_store(tmp_path, [episode("s", 9, started_at=at(-5)), *timeline_episodes()])
    pairs, result = joined(sink, JoinSpec("asof", write_log(tmp_path / "log.jsonl", LOG)))
    assert "ep-000009" not in pairs
    assert (result.matched, result.episodes) == (4, 5)
    assert "1 started before the first training-log row" in result.summary()


def test_running_episodes_have_no_completion_time_and_are_counted(tmp_path: Path) -> None:
    sink = episodes_store(tmp_path, [*timeline_episodes(),
                                episode("s", 5, status="running", completed_at=None)])
    log = write_log(tmp_path / "log.jsonl", LOG)
    _, result = joined(sink, JoinSpec("asof", log, episode_time="completed_at"))
    assert result.matched == 4
    assert "1 have no completed_at (not completed yet)" in result.summary()


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".parquet"])
def test_the_log_may_be_jsonl_csv_or_parquet(tmp_path: Path, suffix: str) -> None:
    sink = episodes_store(tmp_path, timeline_episodes())
    log = write_log(tmp_path / f"log{suffix}", LOG)
    pairs, _ = joined(sink, JoinSpec("asof", log))
    assert pairs["ep-000003"] == "c200"


def test_log_column_names_are_configurable(tmp_path: Path) -> None:
    rows = [{"global_step": r["step"], "wall": r["time"], "ckpt": r["checkpoint"],
             "lr": r["loss"]} for r in LOG]
    sink = episodes_store(tmp_path, timeline_episodes())
    spec = JoinSpec("asof", write_log(tmp_path / "log.jsonl", rows),
                    columns=LogColumns(step="global_step", time="wall", checkpoint="ckpt",
                                       metric="lr"))
    con = connect(sink)
    result = run_join(con, spec)
    assert con.execute("SELECT train_ckpt FROM joined WHERE episode_index = 3").fetchone() == (
        "c200",)
    assert result.group_column == "train_ckpt"


# --------------------------------------------------------------------------- time zones


def test_timestamps_with_an_offset_are_compared_as_instants(tmp_path: Path) -> None:
    # 14:00:30+02:00 is 12:00:30Z: c200 is live from t=30 on, exactly as in LOG
    shifted = [dict(r, time=t) for r, t in zip(LOG, [
        "2026-03-01T14:00:00+02:00", "2026-03-01T14:00:30+02:00", "2026-03-01T07:00:45-05:00"],
        strict=True)]
    sink = episodes_store(tmp_path, timeline_episodes())
    pairs, _ = joined(sink, JoinSpec("asof", write_log(tmp_path / "log.jsonl", shifted)))
    assert pairs == {"ep-000001": "c100", "ep-000002": "c100",
                     "ep-000003": "c200", "ep-000004": "c300"}


def test_timestamps_without_an_offset_are_refused_as_ambiguous(tmp_path: Path) -> None:
    naive = [dict(r, time=r["time"].removesuffix("Z")) for r in LOG]
    sink = episodes_store(tmp_path, timeline_episodes())
    with pytest.raises(JoinError, match=r"3 timestamp\(s\) .* have no UTC offset .*line 1"):
        joined(sink, JoinSpec("asof", write_log(tmp_path / "log.jsonl", naive)))


def test_a_named_log_timezone_resolves_local_timestamps(tmp_path: Path) -> None:
    # Paris is UTC+1 in March: 13:00:30 local is 12:00:30Z
    local = [dict(r, time=t) for r, t in zip(LOG, [
        "2026-03-01 13:00:00", "2026-03-01 13:00:30", "2026-03-01 13:00:45"], strict=True)]
    sink = episodes_store(tmp_path, timeline_episodes())
    log = write_log(tmp_path / "log.csv", local)
    pairs, _ = joined(sink, JoinSpec("asof", log, log_timezone="Europe/Paris"))
    assert pairs["ep-000003"] == "c200"
    assert pairs["ep-000002"] == "c100"


def test_naive_parquet_timestamps_need_a_log_timezone(tmp_path: Path) -> None:
    rows = [dict(r, time=T0.replace(tzinfo=None)) for r in LOG[:1]]
    sink = episodes_store(tmp_path, timeline_episodes())
    log = write_log(tmp_path / "log.parquet", rows)
    with pytest.raises(JoinError, match="without a time zone"):
        joined(sink, JoinSpec("asof", log))
    pairs, _ = joined(sink, JoinSpec("asof", log, log_timezone="UTC"))
    assert set(pairs.values()) == {"c100"}


def test_local_times_repeated_by_a_dst_change_are_refused(tmp_path: Path) -> None:
    # 2026-10-25 02:30 happened twice in Paris (clocks went back at 03:00 CEST)
    rows = [dict(LOG[0], time="2026-10-25T02:30:00")]
    sink = episodes_store(tmp_path, timeline_episodes())
    log = write_log(tmp_path / "log.jsonl", rows)
    with pytest.raises(JoinError, match=r"ambiguous .* in Europe/Paris"):
        joined(sink, JoinSpec("asof", log, log_timezone="Europe/Paris"))


def test_local_times_skipped_by_a_dst_change_are_refused(tmp_path: Path) -> None:
    rows = [dict(LOG[0], time="2026-03-29T02:30:00")]
    sink = episodes_store(tmp_path, timeline_episodes())
    log = write_log(tmp_path / "log.jsonl", rows)
    with pytest.raises(JoinError, match="nonexistent"):
        joined(sink, JoinSpec("asof", log, log_timezone="Europe/Paris"))


def test_an_unknown_log_timezone_is_refused(tmp_path: Path) -> None:
    sink = episodes_store(tmp_path, timeline_episodes())
    log = write_log(tmp_path / "log.jsonl", LOG)
    with pytest.raises(JoinError, match="unknown time zone 'Mars/Olympus'"):
        joined(sink, JoinSpec("asof", log, log_timezone="Mars/Olympus"))


def test_unparseable_timestamps_are_reported_with_their_rows(tmp_path: Path) -> None:
    rows = [LOG[0], dict(LOG[1], time="yesterday-ish"), LOG[2]]
    sink = episodes_store(tmp_path, timeline_episodes())
    with pytest.raises(JoinError, match=r"1 timestamp\(s\) .* cannot be parsed \(line 2: "
                                        r"'yesterday-ish'\)"):
        joined(sink, JoinSpec("asof", write_log(tmp_path / "log.jsonl", rows)))


def test_a_csv_logs_bad_timestamp_is_reported_at_its_line_below_the_header(
        tmp_path: Path) -> None:
    rows = [LOG[0], dict(LOG[1], time="yesterday-ish"), LOG[2]]
    sink = episodes_store(tmp_path, timeline_episodes())
    with pytest.raises(JoinError, match=r"cannot be parsed \(line 3: 'yesterday-ish'\)"):
        joined(sink, JoinSpec("asof", write_log(tmp_path / "log.csv", rows)))


def test_a_time_that_is_not_a_finite_number_is_refused_with_its_line(tmp_path: Path) -> None:
    base = T0.timestamp()
    rows = [dict(LOG[0], time=base), dict(LOG[1], time=float("nan")), dict(LOG[2], time=base)]
    sink = episodes_store(tmp_path, timeline_episodes())
    with pytest.raises(JoinError, match=r"1 time\(s\) .* not finite numbers \(first: line 2"):
        joined(sink, JoinSpec("asof", write_log(tmp_path / "log.jsonl", rows)))


def test_epoch_seconds_are_instants(tmp_path: Path) -> None:
    base = T0.timestamp()
    rows = [dict(r, time=base + dt) for r, dt in zip(LOG, [0, 30, 45], strict=True)]
    sink = episodes_store(tmp_path, timeline_episodes())
    pairs, _ = joined(sink, JoinSpec("asof", write_log(tmp_path / "log.jsonl", rows)))
    assert pairs["ep-000003"] == "c200"


def test_epoch_milliseconds_are_refused_unless_the_unit_is_given(tmp_path: Path) -> None:
    base = T0.timestamp() * 1000
    rows = [dict(r, time=int(base + dt)) for r, dt in zip(LOG, [0, 30_000, 45_000],
                                                          strict=True)]
    sink = episodes_store(tmp_path, timeline_episodes())
    log = write_log(tmp_path / "log.csv", rows)
    with pytest.raises(JoinError, match="--epoch-unit ms"):
        joined(sink, JoinSpec("asof", log))
    pairs, _ = joined(sink, JoinSpec("asof", log, epoch_unit="ms"))
    assert pairs["ep-000003"] == "c200"


# --------------------------------------------------------------------------- by key


def test_key_join_puts_a_checkpoints_episodes_next_to_its_row(tmp_path: Path) -> None:
    sink = episodes_store(tmp_path, [
        episode("s", 1, model_component_id="c200"),
        episode("s", 2, model_component_id="c300"),
        episode("t", 1, model_component_id="c200"),
    ])
    con = connect(sink)
    run_join(con, JoinSpec("key", write_log(tmp_path / "log.jsonl", LOG)))
    rows = con.execute("SELECT session_id, episode_record_id, train_step, train_loss "
                       "FROM joined ORDER BY ALL").fetchall()
    assert rows == [("s", "ep-000001", 200, 0.5), ("s", "ep-000002", 300, 0.3),
                    ("t", "ep-000001", 200, 0.5)]


def test_key_join_uses_the_first_row_of_a_repeated_checkpoint(tmp_path: Path) -> None:
    # a log that repeats the current checkpoint on every step: c200 was saved at step 200
    log_rows = [*LOG, dict(LOG[1], step=250, loss=0.45)]
    sink = episodes_store(tmp_path, [episode("s", 1, model_component_id="c200")])
    con = connect(sink)
    result = run_join(con, JoinSpec("key", write_log(tmp_path / "log.jsonl", log_rows)))
    assert con.execute("SELECT train_step FROM joined").fetchall() == [(200,)]
    assert any("repeat a checkpoint" in n for n in result.notes)


def test_key_join_explains_episodes_of_unknown_checkpoints(tmp_path: Path) -> None:
    sink = episodes_store(tmp_path, [
        episode("s", 1, model_component_id="c100"),
        episode("s", 2, model_component_id="c999"),
        episode("s", 3, model_component_id=None),
    ])
    _, result = joined(sink, JoinSpec("key", write_log(tmp_path / "log.jsonl", LOG)))
    assert result.summary() == (
        "1 of 3 episodes matched a training-log row (1 have no model_component_id; "
        "1 have a model_component_id that is not in the log's 'checkpoint' column)")
    assert "['c999']" in result.notes[0]


def test_key_join_does_not_need_a_time_column(tmp_path: Path) -> None:
    rows = [{"step": r["step"], "checkpoint": r["checkpoint"], "loss": r["loss"]} for r in LOG]
    sink = episodes_store(tmp_path, [episode("s", 1, model_component_id="c300")])
    pairs, _ = joined(sink, JoinSpec("key", write_log(tmp_path / "log.csv", rows)))
    assert pairs == {"ep-000001": "c300"}


# --------------------------------------------------------------------------- errors


def test_a_log_that_matches_nothing_says_how_many_matched_and_why(tmp_path: Path) -> None:
    sink = episodes_store(tmp_path, [episode("s", 1, started_at=at(-100)),
                                episode("s", 2, started_at=at(-50))])
    log = write_log(tmp_path / "log.jsonl", LOG)
    with pytest.raises(JoinError, match=r"no episode matched the training log: 0 of 2 "
                                        r"episodes matched .*2 started before the first "
                                        r"training-log row \(2026-03-01 12:00:00\+00:00\)"):
        joined(sink, JoinSpec("asof", log))


def test_a_missing_log_column_names_the_column_and_lists_the_others(tmp_path: Path) -> None:
    rows = [{"step": r["step"], "time": r["time"]} for r in LOG]
    sink = episodes_store(tmp_path, timeline_episodes())
    with pytest.raises(JoinError, match=r"has no checkpoint column 'checkpoint' "
                                        r"\(--checkpoint-column\); its columns are: step, "
                                        r"time"):
        joined(sink, JoinSpec("key", write_log(tmp_path / "log.jsonl", rows),
                              columns=LogColumns(metric=None)))


def test_a_missing_metric_column_is_named(tmp_path: Path) -> None:
    sink = episodes_store(tmp_path, timeline_episodes())
    with pytest.raises(JoinError, match=r"metric column 'reward_model_loss' \(--metric\)"):
        joined(sink, JoinSpec("asof", write_log(tmp_path / "log.jsonl", LOG),
                              columns=LogColumns(metric="reward_model_loss")))


def test_an_empty_store_is_reported(tmp_path: Path) -> None:
    sink = episodes_store(tmp_path, [])
    with pytest.raises(JoinError, match="no episodes"):
        joined(sink, JoinSpec("asof", write_log(tmp_path / "log.jsonl", LOG)))


# --------------------------------------------------------------------------- outputs


def test_aggregate_per_checkpoint(tmp_path: Path) -> None:
    sink = episodes_store(tmp_path, [
        episode("s", 1, started_at=at(10), cumulative_reward=10.0, success=True, step_ms=1.0),
        episode("s", 2, started_at=at(20), cumulative_reward=20.0, success=False, step_ms=3.0),
        episode("s", 3, started_at=at(35), cumulative_reward=50.0, success=True, step_ms=2.0),
    ])
    spec = JoinSpec("asof", write_log(tmp_path / "log.jsonl", LOG))
    con = connect(sink)
    rows = aggregate(con, spec, run_join(con, spec))
    assert [(r["checkpoint"], r["step"], r["metric"], r["episodes"]) for r in rows] == [
        ("c100", 100, 0.9, 2), ("c200", 200, 0.5, 1)]
    c100 = rows[0]
    assert c100["success_rate"] == pytest.approx(0.5)
    assert c100["mean_reward"] == pytest.approx(15.0)
    assert c100["std_reward"] == pytest.approx(7.0710678)
    assert c100["mean_step_ms"] == pytest.approx(2.0)


def test_cli_writes_the_table_export_and_plot(tmp_path: Path) -> None:
    sink = episodes_store(tmp_path, timeline_episodes(success=True))
    log = write_log(tmp_path / "log.jsonl", LOG)
    result = CliRunner().invoke(join, [
        "--sink", sink, "--log", str(log), "--by", "asof", "--table", "episodes_training",
        "--export", str(tmp_path / "joined.parquet"), "--plot", str(tmp_path / "plot"),
        "--format", "json"])
    assert result.exit_code == 0, result.output
    assert "4 of 4 episodes matched" in result.stderr
    assert [r["checkpoint"] for r in json.loads(result.stdout)["rows"]] == [
        "c100", "c200", "c300"]
    exported = pq.read_table(tmp_path / "joined.parquet")
    assert exported.num_rows == 4
    assert "train_loss" in exported.column_names
    con = duckdb.connect(sink.removeprefix("duckdb://"), read_only=True)
    assert con.execute("SELECT COUNT(*) FROM episodes_training").fetchone() == (4,)
    assert (tmp_path / "plot.png").stat().st_size > 0
    assert (tmp_path / "plot.svg").stat().st_size > 0


def test_cli_exports_csv(tmp_path: Path) -> None:
    sink = episodes_store(tmp_path, timeline_episodes())
    log = write_log(tmp_path / "log.jsonl", LOG)
    out = tmp_path / "joined.csv"
    result = CliRunner().invoke(join, ["--sink", sink, "--log", str(log), "--by", "asof",
                                       "--export", str(out)])
    assert result.exit_code == 0, result.output
    header, *lines = out.read_text().splitlines()
    assert "train_checkpoint" in header.split(",")
    assert len(lines) == 4


def test_cli_turns_join_errors_into_a_message_and_status_1(tmp_path: Path) -> None:
    sink = episodes_store(tmp_path, timeline_episodes())
    log = write_log(tmp_path / "log.jsonl", [{"step": 1}])
    result = CliRunner().invoke(join, ["--sink", sink, "--log", str(log)])
    assert result.exit_code == 1
    assert "has no checkpoint column 'checkpoint'" in result.stderr


def test_cli_refuses_to_overwrite_a_consumer_table(tmp_path: Path) -> None:
    sink = episodes_store(tmp_path, timeline_episodes())
    log = write_log(tmp_path / "log.jsonl", LOG)
    result = CliRunner().invoke(join, ["--sink", sink, "--log", str(log), "--by", "asof",
                                       "--table", "episodes"])
    assert result.exit_code == 1
    assert "refusing to overwrite" in result.stderr


def test_an_unreachable_postgresql_store_is_named_in_the_error() -> None:
    with pytest.raises(SinkError, match=r"cannot connect to postgresql://postgres@127\.0\.0\.1:1/none"):
        connect("postgresql://postgres@127.0.0.1:1/none")


def test_the_log_may_be_a_json_array(tmp_path: Path) -> None:
    sink = episodes_store(tmp_path, timeline_episodes())
    log = tmp_path / "log.json"
    log.write_text(json.dumps(LOG))
    pairs, _ = joined(sink, JoinSpec("asof", log))
    assert pairs["ep-000004"] == "c300"


# --------------------------------------------------------------------------- as of, per run

TWO_RUNS = [  # two training runs logging at interleaved times
    {"run": "run-a", "step": 10, "time": "2026-03-01T12:00:00Z", "checkpoint": "a10", "loss": 1.0},
    {"run": "run-b", "step": 10, "time": "2026-03-01T12:00:05Z", "checkpoint": "b10", "loss": 2.0},
    {"run": "run-a", "step": 20, "time": "2026-03-01T12:00:30Z", "checkpoint": "a20", "loss": 0.5},
    {"run": "run-b", "step": 20, "time": "2026-03-01T12:00:40Z", "checkpoint": "b20", "loss": 1.5},
]


def test_asof_match_follows_each_actors_own_run(tmp_path: Path) -> None:
    sink = episodes_store(tmp_path, [
        episode("a", 1, model_component_id="run-a", started_at=at(35)),  # a20 (b20 not yet)
        episode("b", 1, model_component_id="run-b", started_at=at(35)),  # b10, not a20
        episode("b", 2, model_component_id="run-b", started_at=at(45)),  # b20
    ])
    log = write_log(tmp_path / "runs.jsonl", TWO_RUNS)
    con = connect(sink)
    run_join(con, JoinSpec("asof", log, asof_match=("model_component_id", "run")))
    rows = con.execute("SELECT session_id, episode_record_id, train_checkpoint FROM joined "
                       "ORDER BY ALL").fetchall()
    assert rows == [("a", "ep-000001", "a20"), ("b", "ep-000001", "b10"),
                    ("b", "ep-000002", "b20")]


def test_asof_match_counts_episodes_of_runs_not_in_the_log(tmp_path: Path) -> None:
    sink = episodes_store(tmp_path, [
        episode("a", 1, model_component_id="run-a", started_at=at(35)),
        episode("c", 1, model_component_id="run-c", started_at=at(35)),
        episode("b", 1, model_component_id="run-b", started_at=at(1)),  # before run-b's first row
    ])
    log = write_log(tmp_path / "runs.jsonl", TWO_RUNS)
    _, result = joined(sink, JoinSpec("asof", log, asof_match=("model_component_id", "run")))
    assert result.summary() == (
        "1 of 3 episodes matched a training-log row (1 have a model_component_id that is not "
        "in the log's 'run' column; 1 started before the first training-log row of their run)")


def test_cli_match_needs_two_column_names(tmp_path: Path) -> None:
    sink = episodes_store(tmp_path, timeline_episodes())
    log = write_log(tmp_path / "log.jsonl", LOG)
    result = CliRunner().invoke(join, ["--sink", sink, "--log", str(log), "--by", "asof",
                                       "--match", "model_component_id"])
    assert result.exit_code == 2
    assert "EPISODE_COL=LOG_COL" in result.stderr


def test_a_log_timezone_leaves_timestamps_with_an_offset_alone(tmp_path: Path) -> None:
    # 02:30 does not exist in Paris on 2026-03-29, but this one says it is UTC
    rows = [dict(LOG[0], time="2026-03-29T02:30:00+00:00")]
    later = dt.datetime(2026, 3, 29, 3, 0, tzinfo=dt.UTC)
    sink = episodes_store(tmp_path, [episode("s", 1, started_at=later)])
    log = write_log(tmp_path / "log.jsonl", rows)
    pairs, _ = joined(sink, JoinSpec("asof", log, log_timezone="Europe/Paris"))
    assert pairs == {"ep-000001": "c100"}


# --------------------------------------------------------------------------- non-finite numbers


def _strict_json(text: str) -> Any:
    """Parse as RFC 8259 JSON: NaN, Infinity and -Infinity are not JSON."""
    def refuse(name: str) -> Any:
        raise ValueError(f"not JSON: {name}")

    return json.loads(text, parse_constant=refuse)


def _diverged_run(tmp_path: Path, fmt: str) -> Any:
    """Join a log whose loss is NaN at c100, infinite at c200 and missing at c300."""
    sink = episodes_store(tmp_path, timeline_episodes())
    losses = [float("nan"), float("inf"), None]
    rows = [dict(r, loss=v) for r, v in zip(LOG, losses, strict=True)]
    log = write_log(tmp_path / "log.parquet", rows)
    return CliRunner().invoke(join, ["--sink", sink, "--log", str(log), "--by", "asof",
                                     "--format", fmt])


def test_cli_json_is_strict_and_spells_non_finite_numbers_as_strings(tmp_path: Path) -> None:
    result = _diverged_run(tmp_path, "json")
    assert result.exit_code == 0, result.output
    rows = _strict_json(result.stdout)["rows"]
    assert [(r["checkpoint"], r["metric"]) for r in rows] == [
        ("c100", "NaN"), ("c200", "Infinity"), ("c300", None)]


@pytest.mark.parametrize("fmt", ["table", "markdown", "html"])
def test_cli_text_shows_a_nan_loss_as_nan_not_as_missing(tmp_path: Path, fmt: str) -> None:
    result = _diverged_run(tmp_path, fmt)
    assert result.exit_code == 0, result.output
    rows = result.stdout.split("<tr") if fmt == "html" else result.stdout.splitlines()
    lines = {c: [row for row in rows if c in row] for c in ("c100", "c200", "c300")}
    assert "NaN" in lines["c100"][0]
    assert "Infinity" in lines["c200"][0]
    assert "—" in lines["c300"][0] and "NaN" not in lines["c300"][0]

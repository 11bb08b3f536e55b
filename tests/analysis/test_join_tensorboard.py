"""`join --log DIR`: TensorBoard event files (written by tensorboardX) as the training log.

The logs are those of analysis_training_logs (two runs, tags at their own
non-uniform steps); the expected values are read off its table by hand.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from rlmesh_stream.consumers.analysis.join import (
    JoinError,
    JoinSpec,
    LogColumns,
)
from tests.analysis.analysis_join import join_rows
from tests.analysis.analysis_stores import at, episode, episodes_store
from tests.analysis.analysis_training_logs import LOSS, write_csv, write_tensorboard

COLUMNS = LogColumns(metric=LOSS)
STEP_KEY = r"ckpt-(\d+)"
RUN_KEY = r"(?P<run>[^/]+)/ckpt-(?P<step>\d+)"


def checkpoint_episodes(*ids: str) -> list[dict[str, Any]]:
    return [episode("s", i, model_component_id=m) for i, m in enumerate(ids, start=1)]


# --------------------------------------------------------------------------- by key


def test_key_join_reads_the_step_from_the_checkpoint_id_and_takes_that_steps_row(
        tmp_path: Path) -> None:
    logdir = write_tensorboard(tmp_path / "runs", ["ppo_1"])
    sink = episodes_store(tmp_path, checkpoint_episodes("ckpt-1000", "ckpt-3000"))
    spec = JoinSpec("key", logdir / "ppo_1", COLUMNS, checkpoint_step=STEP_KEY)
    rows, _, _ = join_rows(sink, spec)
    assert rows == [("ep-000001", ".", 1000, 0.5, 20.0), ("ep-000002", ".", 3000, 0.125, 80.0)]


def test_a_checkpoint_between_logged_steps_gets_the_latest_row_with_the_metric(
        tmp_path: Path) -> None:
    # step 2000 logged only the reward: ckpt-2000's loss is the one logged at step 1000
    logdir = write_tensorboard(tmp_path / "runs", ["ppo_1"])
    sink = episodes_store(tmp_path, checkpoint_episodes("ckpt-2000"))
    rows, summary, _ = join_rows(sink, JoinSpec("key", logdir / "ppo_1", COLUMNS,
                                          checkpoint_step=STEP_KEY))
    assert rows == [("ep-000001", ".", 1000, 0.5, 20.0)]
    assert [(r["checkpoint"], r["step"], r["metric"]) for r in summary] == [
        ("ckpt-2000", 2000, 0.5)]


def test_episodes_whose_id_the_checkpoint_regex_does_not_match_are_counted(
        tmp_path: Path) -> None:
    logdir = write_tensorboard(tmp_path / "runs", ["ppo_1"])
    sink = episodes_store(tmp_path, checkpoint_episodes("ckpt-1000", "final", "best"))
    _, _, result = join_rows(sink, JoinSpec("key", logdir / "ppo_1", COLUMNS,
                                      checkpoint_step=STEP_KEY))
    assert result.summary() == (
        "1 of 3 episodes matched a training-log row (2 have a model_component_id that "
        r"--checkpoint-step 'ckpt-(\d+)' does not match)")
    assert "['best', 'final']" in result.notes[0]


def test_a_regex_group_named_run_picks_each_checkpoints_own_run(tmp_path: Path) -> None:
    logdir = write_tensorboard(tmp_path / "runs")
    sink = episodes_store(tmp_path, checkpoint_episodes("ppo_1/ckpt-2000", "ppo_2/ckpt-2000"))
    rows, _, _ = join_rows(sink, JoinSpec("key", logdir, COLUMNS, checkpoint_step=RUN_KEY))
    assert rows == [("ep-000001", "ppo_1", 1000, 0.5, 20.0),
                    ("ep-000002", "ppo_2", 1500, 1.5, 10.0)]


# --------------------------------------------------------------------------- as of


def test_asof_join_uses_the_events_wall_time(tmp_path: Path) -> None:
    # loss rows of ppo_1 at t=0 (step 0), 10 (1000), 25 (2500), 30 (3000); 20 (2000) has none
    logdir = write_tensorboard(tmp_path / "runs", ["ppo_1"])
    sink = episodes_store(tmp_path, [episode("s", i, started_at=at(t))
                                for i, t in enumerate([5, 20, 27, 40], start=1)])
    rows, _, _ = join_rows(sink, JoinSpec("asof", logdir, COLUMNS))
    assert [(r[0], r[2], r[3]) for r in rows] == [
        ("ep-000001", 0, 1.0), ("ep-000002", 1000, 0.5), ("ep-000003", 2500, 0.25),
        ("ep-000004", 3000, 0.125)]


def test_asof_match_tells_the_runs_apart_by_their_directory(tmp_path: Path) -> None:
    logdir = write_tensorboard(tmp_path / "runs")
    sink = episodes_store(tmp_path, [episode("a", 1, model_component_id="ppo_1", started_at=at(20)),
                                episode("b", 1, model_component_id="ppo_2", started_at=at(20))])
    rows, _, _ = join_rows(sink, JoinSpec("asof", logdir, COLUMNS,
                                    asof_match=("model_component_id", "run")))
    assert rows == [("ep-000001", "ppo_1", 1000, 0.5, 20.0),
                    ("ep-000001", "ppo_2", 1500, 1.5, 10.0)]


def test_the_summary_keeps_two_runs_at_the_same_step_apart(tmp_path: Path) -> None:
    # both runs logged their loss at step 3000 (t=30): 0.125 in ppo_1, 0.75 in ppo_2
    logdir = write_tensorboard(tmp_path / "runs")
    sink = episodes_store(tmp_path, [episode("a", 1, model_component_id="ppo_1", started_at=at(40)),
                                episode("b", 1, model_component_id="ppo_2", started_at=at(40))])
    _, summary, _ = join_rows(sink, JoinSpec("asof", logdir, COLUMNS,
                                       asof_match=("model_component_id", "run")))
    assert [(r["checkpoint"], r["step"], r["metric"]) for r in summary] == [
        ("ppo_1/3000", 3000, 0.125), ("ppo_2/3000", 3000, 0.75)]


def test_several_runs_without_a_match_are_refused(tmp_path: Path) -> None:
    logdir = write_tensorboard(tmp_path / "runs")
    sink = episodes_store(tmp_path, [episode("s", 1, started_at=at(20))])
    with pytest.raises(JoinError, match=r"several runs \(ppo_1, ppo_2\).*--match"):
        join_rows(sink, JoinSpec("asof", logdir, COLUMNS))


def test_a_single_event_file_is_a_log(tmp_path: Path) -> None:
    logdir = write_tensorboard(tmp_path / "runs", ["ppo_1"])
    (event_file,) = (logdir / "ppo_1").glob("events.out.tfevents.*")
    sink = episodes_store(tmp_path, checkpoint_episodes("ckpt-3000"))
    rows, _, _ = join_rows(sink, JoinSpec("key", event_file, COLUMNS, checkpoint_step=STEP_KEY))
    assert rows == [("ep-000001", ".", 3000, 0.125, 80.0)]


# --------------------------------------------------------------------------- same as CSV

CASES = {
    "key, one run": (["ppo_1"], JoinSpec("key", None, COLUMNS, checkpoint_step=STEP_KEY),
                     checkpoint_episodes("ckpt-0", "ckpt-1000", "ckpt-2000", "ckpt-2999",
                                         "ckpt-3000", "ckpt-9000", "final")),
    "key, run in the id": (None, JoinSpec("key", None, COLUMNS, checkpoint_step=RUN_KEY),
                           checkpoint_episodes("ppo_1/ckpt-2000", "ppo_2/ckpt-400",
                                               "ppo_2/ckpt-1500", "ppo_1/ckpt-2600",
                                               "ppo_2/ckpt-3000", "ppo_3/ckpt-1")),
    "asof, per run": (None, JoinSpec("asof", None, COLUMNS,
                                     asof_match=("model_component_id", "run")),
                      [episode("s", i, model_component_id=f"ppo_{1 + i % 2}", started_at=at(t))
                       for i, t in enumerate([-1, 3, 5, 12, 15, 22, 26, 31, 45], start=1)]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_tensorboard_log_joins_exactly_like_the_same_log_as_csv(tmp_path: Path,
                                                                   case: str) -> None:
    runs, spec, episodes = CASES[case]
    logdir = write_tensorboard(tmp_path / "runs", runs)
    csv_log = write_csv(tmp_path / "log.csv", runs)
    sink = episodes_store(tmp_path, episodes)
    tb_rows, tb_summary, tb_result = join_rows(sink, replace(spec, log=logdir))
    csv_rows, csv_summary, csv_result = join_rows(sink, replace(spec, log=csv_log))
    assert len(tb_rows) > 2
    assert tb_rows == csv_rows
    assert tb_summary == csv_summary
    assert tb_result.summary() == csv_result.summary()


def test_scalar_plugin_tensors_read_like_simple_values(tmp_path: Path) -> None:
    # tf.summary.scalar writes a tensor of the scalars plugin; so does --to-tensorboard
    from rlmesh_stream.consumers.analysis.training_logs.tensorboard import read_tensorboard
    from rlmesh_stream.consumers.analysis.training_logs.writeback import (
        EvalPoints,
    )
    from rlmesh_stream.consumers.analysis.training_logs.writeback import (
        write_tensorboard as write_eval,
    )

    write_eval(EvalPoints({100: {"eval/mean_reward": 0.125}, 700: {"eval/mean_reward": 2.5}},
                          []), tmp_path / "eval")
    (path,) = (tmp_path / "eval").glob("events.out.tfevents.*")
    table = read_tensorboard(path)
    assert table.select(["step", "eval/mean_reward"]).to_pylist() == [
        {"step": 100, "eval/mean_reward": 0.125}, {"step": 700, "eval/mean_reward": 2.5}]

"""`join --follow`'s passes over a hand-built store: when a checkpoint is complete, what is
written once, what a restart reads back from the outputs, late episodes, torn records.

The stack-level behaviour (topics, SIGKILL, the servers) is in test_join_follow.py; here
each pass runs over a DuckDB store whose rows the test wrote, so every count is known.
"""

from __future__ import annotations

from pathlib import Path

from rlmesh_stream.consumers.analysis.follow import (
    Follower,
    Rule,
    TensorBoardOutput,
    snapshot,
)
from rlmesh_stream.consumers.analysis.join import JoinSpec, LogColumns
from rlmesh_stream.consumers.analysis.training_logs.tensorboard import file_points
from tests.analysis.analysis_stores import episode, insert, make_store
from tests.analysis.analysis_training_logs import LOSS, write_tensorboard


def spec(logdir: Path) -> JoinSpec:
    return JoinSpec("key", logdir / "ppo_1", LogColumns(metric=LOSS),
                    checkpoint_step=r"ckpt-(\d+)")


class Store:
    """The follower's store, written by the test; `passes` snapshots it as `follow` does."""

    def __init__(self, path: Path) -> None:
        self.con = make_store(path)

    def add(self, *rows: dict[str, object]) -> None:
        insert(self.con, "episodes", rows)

    def end_session(self, session: str, total_episodes: int | None = None) -> None:
        """`session_ended` read; `total_episodes`: the episodes it says it completed."""
        self.con.execute("INSERT INTO episode_session_ends (session_id, ended_at, status, "
                         "total_episodes) VALUES (?, now(), 'ended', ?)",
                         [session, total_episodes])

    def complete(self, session: str, index: int, reward: float) -> None:
        """An episode's `episode_completed` read after it was marked abandoned."""
        self.con.execute("UPDATE episodes SET status = 'completed', cumulative_reward = ? "
                         "WHERE session_id = ? AND episode_record_id = ?",
                         [reward, session, f"ep-{index:06d}"])

    def step(self, follower: Follower, now: float = 0.0) -> int:
        con = snapshot(self.con.cursor())
        try:
            return follower.step(con, now)
        finally:
            con.close()


def written_steps(directory: Path) -> dict[int, float]:
    return TensorBoardOutput(directory).written()


def written_means(directory: Path) -> dict[int, float]:
    """Step -> eval/mean_reward of every point in the eval files of `directory`."""
    return {step: value for path in sorted(directory.glob("events.out.tfevents.*"))
            for _run, tag, step, _wall, value in file_points(path, ".", {})
            if tag == "eval/mean_reward"}


def setup(tmp_path: Path, rule: Rule | None = None
          ) -> tuple[Store, Follower, Path, list[str]]:
    logdir = write_tensorboard(tmp_path / "runs", ["ppo_1"])
    lines: list[str] = []
    follower = Follower(spec(logdir), [TensorBoardOutput(tmp_path / "eval")], rule or Rule(),
                        lines.append)
    follower.start()
    return Store(tmp_path / "follow.duckdb"), follower, tmp_path / "eval", lines


def add_one_done_one_open(store: Store) -> None:
    """Session "s" ran two episodes of ckpt-1000: the first completed (reward 10), the
    second marked abandoned by the builder (its episode_completed not read, or never)."""
    store.add(episode("s", 1, model_component_id="ckpt-1000"),
              episode("s", 2, model_component_id="ckpt-1000", status="abandoned",
                      cumulative_reward=None))


def test_a_checkpoint_is_written_once_every_session_that_ran_it_has_ended(
        tmp_path: Path) -> None:
    store, follower, out, lines = setup(tmp_path)
    store.add(episode("s", 1, model_component_id="ckpt-1000"),
              episode("t", 1, model_component_id="ckpt-1000"))
    store.end_session("s")
    assert store.step(follower) == 0
    assert "ckpt-1000: 2 episodes (1 session(s) open)" in lines[-1]
    store.end_session("t")
    assert store.step(follower) == 1
    assert store.step(follower) == 0  # once
    follower.close()
    assert written_steps(out) == {1000: 2.0}


def test_a_checkpoint_with_a_running_episode_waits_whatever_the_rule(tmp_path: Path) -> None:
    store, follower, out, _ = setup(tmp_path, Rule(eval_episodes=1, quiet_s=0.0))
    store.add(episode("s", 1, model_component_id="ckpt-1000"),
              episode("s", 2, model_component_id="ckpt-1000", status="running"))
    assert store.step(follower, now=100.0) == 0
    follower.close()
    assert written_steps(out) == {}


def test_eval_episodes_completes_a_checkpoint_whose_session_goes_on(tmp_path: Path) -> None:
    store, follower, out, _ = setup(tmp_path, Rule(eval_episodes=2))
    store.add(episode("s", 1, model_component_id="ckpt-1000"))
    assert store.step(follower) == 0
    store.add(episode("s", 2, model_component_id="ckpt-1000"))
    assert store.step(follower) == 1
    follower.close()
    assert written_steps(out) == {1000: 2.0}


def test_eval_episodes_waits_for_n_episodes_though_every_session_seen_has_ended(
        tmp_path: Path) -> None:
    store, follower, out, lines = setup(tmp_path, Rule(eval_episodes=2))
    store.add(episode("s", 1, model_component_id="ckpt-1000"))
    store.end_session("s", total_episodes=1)  # the next session has not published yet
    assert store.step(follower) == 0
    assert "ckpt-1000: 1 episodes (1 short of --eval-episodes 2)" in lines[-1]
    store.add(episode("t", 1, model_component_id="ckpt-1000", cumulative_reward=20.0))
    assert store.step(follower) == 1
    follower.close()
    assert written_steps(out) == {1000: 2.0}
    assert written_means(out) == {1000: 15.0}


def test_a_session_end_read_before_its_last_completion_keeps_the_checkpoint_waiting(
        tmp_path: Path) -> None:
    store, follower, out, lines = setup(tmp_path)
    add_one_done_one_open(store)  # the second's episode_completed not read yet
    store.end_session("s", total_episodes=2)
    assert store.step(follower) == 0
    assert ("ckpt-1000: 2 episodes (1 abandoned, session not all read, "
            "1 session(s) ended, not all read)") in lines[-1]
    store.complete("s", 2, 30.0)
    assert store.step(follower) == 1
    follower.close()
    assert written_steps(out) == {1000: 2.0}
    assert written_means(out) == {1000: 20.0}  # (10 + 30) / 2: both read


def test_eval_episodes_counts_no_episode_abandoned_before_its_session_is_all_read(
        tmp_path: Path) -> None:
    store, follower, out, _ = setup(tmp_path, Rule(eval_episodes=2))
    add_one_done_one_open(store)
    store.end_session("s", total_episodes=2)
    assert store.step(follower) == 0
    store.complete("s", 2, 30.0)
    assert store.step(follower) == 1
    follower.close()
    assert written_means(out) == {1000: 20.0}


def test_an_episode_its_ended_session_never_completed_is_final(tmp_path: Path) -> None:
    store, follower, out, _ = setup(tmp_path)
    add_one_done_one_open(store)
    store.end_session("s", total_episodes=1)  # it ended mid-episode: all of it is read
    assert store.step(follower) == 1
    follower.close()
    assert written_steps(out) == {1000: 2.0}
    assert written_means(out) == {1000: 10.0}  # over its completed episode


def test_quiet_seconds_writes_a_checkpoint_whose_sessions_episodes_never_all_arrive(
        tmp_path: Path) -> None:
    store, follower, out, _ = setup(tmp_path, Rule(quiet_s=5.0))
    add_one_done_one_open(store)
    store.end_session("s", total_episodes=2)  # its second completion was never published
    assert store.step(follower, now=10.0) == 0
    assert store.step(follower, now=15.0) == 1
    follower.close()
    assert written_steps(out) == {1000: 2.0}
    assert written_means(out) == {1000: 10.0}


def test_quiet_seconds_completes_a_checkpoint_unchanged_that_long(tmp_path: Path) -> None:
    store, follower, _, _ = setup(tmp_path, Rule(quiet_s=5.0))
    store.add(episode("s", 1, model_component_id="ckpt-1000"))
    assert store.step(follower, now=10.0) == 0
    store.add(episode("s", 2, model_component_id="ckpt-1000"))
    assert store.step(follower, now=14.0) == 0  # changed at 14
    assert store.step(follower, now=18.9) == 0
    assert store.step(follower, now=19.0) == 1
    follower.close()


def test_a_restarted_follower_writes_only_what_the_output_lacks(tmp_path: Path) -> None:
    store, first, out, _ = setup(tmp_path)
    store.add(episode("s", 1, model_component_id="ckpt-1000"))
    store.end_session("s")
    assert store.step(first) == 1
    first.close()  # (a SIGKILL leaves the same: each point is flushed when written)
    store.add(episode("t", 1, model_component_id="ckpt-2000"))
    store.end_session("t")
    _, second, _, lines = setup(tmp_path)
    assert "already holds 1 checkpoint(s)" in lines[0]
    assert store.step(second) == 1
    second.close()
    assert written_steps(out) == {1000: 1.0, 2000: 1.0}
    assert len(list(out.glob("events.out.tfevents.*"))) == 2  # appended: a file per process


def test_episodes_after_a_written_point_are_counted_late_not_written(tmp_path: Path) -> None:
    store, follower, out, lines = setup(tmp_path)
    store.add(episode("s", 1, model_component_id="ckpt-1000"))
    store.end_session("s")
    assert store.step(follower) == 1
    store.add(episode("u", 1, model_component_id="ckpt-1000"),
              episode("u", 2, model_component_id="ckpt-1000"))
    store.end_session("u")
    assert store.step(follower) == 0
    assert follower.late() == {"ckpt-1000": 2}
    assert "late (not in the written point): ckpt-1000 +2" in lines[-1]
    follower.close()
    assert written_steps(out) == {1000: 1.0}


def test_a_record_torn_by_a_kill_is_cut_off_and_its_point_written_again(
        tmp_path: Path) -> None:
    store, first, out, _ = setup(tmp_path)
    store.add(episode("s", 1, model_component_id="ckpt-1000"),
              episode("t", 1, model_component_id="ckpt-2000"))
    store.end_session("s")
    assert store.step(first) == 1
    first.close()
    (path,) = out.glob("events.out.tfevents.*")
    whole = path.stat().st_size
    with open(path, "ab") as f:  # a kill in mid-write: a length, and half of its record
        f.write((200).to_bytes(8, "little") + b"\0" * 30)
    store.end_session("t")
    _, second, _, _ = setup(tmp_path)
    assert path.stat().st_size == whole
    assert store.step(second) == 1
    second.close()
    assert written_steps(out) == {1000: 1.0, 2000: 1.0}


def test_a_join_that_cannot_be_made_yet_is_shown_as_waited_for(tmp_path: Path) -> None:
    store, follower, _, lines = setup(tmp_path)
    assert store.step(follower) == 0
    assert lines[-1].startswith("waiting: the store has no episodes")
    follower.close()


def test_a_training_log_not_written_yet_is_waited_for_then_read(tmp_path: Path) -> None:
    logdir = tmp_path / "runs"
    (logdir / "ppo_1").mkdir(parents=True)
    lines: list[str] = []
    follower = Follower(spec(logdir), [TensorBoardOutput(tmp_path / "eval")], Rule(),
                        lines.append)
    follower.start()
    store = Store(tmp_path / "follow.duckdb")
    store.add(episode("s", 1, model_component_id="ckpt-1000"))
    store.end_session("s")
    assert store.step(follower) == 0
    assert lines[-1].startswith("waiting: no TensorBoard event files")
    write_tensorboard(logdir, ["ppo_1"])  # the trainer's first flush
    assert store.step(follower) == 1
    follower.close()

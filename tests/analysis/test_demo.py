"""`rlmesh-stream demo`: real CartPole rollouts through the whole pipeline, on the real stack."""

from __future__ import annotations

import uuid
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from rlmesh_stream.infra.demo import CHECKPOINTS, CONCURRENT_SESSIONS, ENV_ID, SIM_ENV_ID
from rlmesh_stream.infra.demo_cli import demo
from rlmesh_stream.producer.manifest import Manifest
from rlmesh_stream.schemas.connection.config import StreamConfig
from tests.analysis.tool_servers import Server, tensorboard_scalars, tensorboard_tags, wait_for

pytestmark = pytest.mark.stack

EPISODES = 2


@pytest.fixture(scope="module")
def demo_run(tensorboard_logdir: Path, stack: object) -> tuple[Path, str]:
    # under the TensorBoard server's log directory: its runs are `<out>/tensorboard/...`
    out = tensorboard_logdir / f"demo-{uuid.uuid4().hex[:8]}"
    config = StreamConfig.from_env(env={}, bootstrap=stack.bootstrap,  # type: ignore[attr-defined]
                                   registry_url=stack.registry_url)  # type: ignore[attr-defined]
    result = CliRunner().invoke(demo, [
        "--episodes", str(EPISODES), "--out", str(out), "--no-start-stack",
        "--bootstrap", config.bootstrap, "--registry-url", config.registry_url])
    assert result.exit_code == 0, result.output + repr(result.exception)
    return out, result.stdout


def _query(out: Path, sql: str) -> list[tuple]:
    con = duckdb.connect(str(out / "demo.duckdb"), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def test_every_rollout_episode_lands_completed_in_the_store(demo_run: tuple[Path, str]) -> None:
    out, _ = demo_run
    rows = _query(out, "SELECT model_component_id, COUNT(*), COUNT(*) FILTER "
                       f"(WHERE status = 'completed') FROM episodes WHERE env_id = '{ENV_ID}' "
                       "GROUP BY 1 ORDER BY 1")
    per_checkpoint = EPISODES * CONCURRENT_SESSIONS
    assert rows == [(ck.name, per_checkpoint, per_checkpoint) for ck in CHECKPOINTS]


def test_every_concurrent_session_of_every_checkpoint_ended(demo_run: tuple[Path, str]) -> None:
    out, _ = demo_run
    assert _query(out, "SELECT model_component_id, status, COUNT(*) FROM sessions "
                       f"WHERE env_id = '{ENV_ID}' GROUP BY 1, 2 ORDER BY 1") == [
        (ck.name, "ended", CONCURRENT_SESSIONS) for ck in CHECKPOINTS]


def _manifest(out: Path) -> Manifest:
    return Manifest.from_json((out / "simulated_fleet.json").read_text(encoding="utf-8"))


def test_the_simulated_fleet_sessions_agree_with_its_manifest(
    demo_run: tuple[Path, str],
) -> None:
    out, _ = demo_run
    expected = sorted((s.session_id, s.status, s.lane) for s in _manifest(out).sessions)
    assert any(status == "failed" for _, status, _ in expected)
    assert {lane for *_, lane in expected} == {None, 0, 1}
    assert _query(out, "SELECT session_id, status, lane FROM sessions "
                       f"WHERE env_id = '{SIM_ENV_ID}' ORDER BY 1") == expected


def test_the_simulated_fleet_episodes_agree_with_its_manifest(
    demo_run: tuple[Path, str],
) -> None:
    out, _ = demo_run
    manifest = _manifest(out)
    completed = sorted((e.session_id, e.episode_record_id, e.steps)
                       for e in manifest.episodes if e.status != "aborted")
    assert _query(out, "SELECT session_id, episode_record_id, step_count FROM episodes "
                       f"WHERE env_id = '{SIM_ENV_ID}' AND status = 'completed' "
                       "ORDER BY 1, 2") == completed


def test_the_advisory_table_holds_the_simulated_fleets_advisories(
    demo_run: tuple[Path, str],
) -> None:
    out, _ = demo_run
    expected = sorted((s.session_id, a.leg, a.severity, a.message)
                      for s in _manifest(out).sessions for a in s.advisories)
    assert expected
    assert _query(out, "SELECT session_id, leg, severity, message FROM advisories "
                       "ORDER BY 1, 2, 3, 4") == expected


def test_the_producer_delivered_every_event_once(demo_run: tuple[Path, str]) -> None:
    out, _ = demo_run
    ((producers, gaps, duplicates),) = _query(
        out, "SELECT COUNT(*), SUM(gaps), SUM(duplicates) FROM delivery_producers")
    assert (producers, gaps, duplicates) == (1, 0, 0)


def test_the_episode_report_and_the_join_are_printed(demo_run: tuple[Path, str]) -> None:
    _, stdout = demo_run
    assert "Episodes per env and model" in stdout
    total = EPISODES * CONCURRENT_SESSIONS * len(CHECKPOINTS)  # sim models have no checkpoint
    assert f"{total} of " in stdout and "episodes matched a training-log row" in stdout


def test_the_html_report_and_both_plots_are_written(demo_run: tuple[Path, str]) -> None:
    out, _ = demo_run
    for name in ("advisories.html", "eval_vs_training.png", "eval_vs_training.svg"):
        assert (out / name).stat().st_size > 0, name


def test_the_training_log_is_a_tensorboard_run_and_the_eval_curve_is_written_next_to_it(
    demo_run: tuple[Path, str],
) -> None:
    from tensorboard.backend.event_processing.event_multiplexer import EventMultiplexer

    out, stdout = demo_run
    mux = EventMultiplexer().AddRunsFromDirectory(str(out / "tensorboard"))
    mux.Reload()
    assert sorted(mux.Runs()) == ["ppo_demo", "ppo_demo_eval"]
    assert [e.step for e in mux.Scalars("ppo_demo", "train/loss")] == [
        ck.step for ck in CHECKPOINTS]
    eval_steps = [t.step for t in mux.Tensors("ppo_demo_eval", "eval/success_rate")]
    assert eval_steps == [ck.step for ck in CHECKPOINTS]
    assert "eval curve written back" in stdout


def test_tensorboards_server_shows_the_demos_eval_curve_next_to_the_training_loss(
        demo_run: tuple[Path, str], tensorboard: Server) -> None:
    # what `tensorboard --logdir rlmesh-demo/tensorboard` shows, in its default loader
    from rlmesh_stream.consumers.analysis.training_logs.writeback import (
        EVAL_METRICS,
        read_tensorboard_eval,
    )

    out, _ = demo_run
    runs = f"{out.name}/tensorboard"
    tags = wait_for(lambda: tensorboard_tags(tensorboard).get(f"{runs}/ppo_demo_eval"),
                    timeout=60, what="TensorBoard to list the demo's eval scalars")
    assert tags == sorted(EVAL_METRICS)
    assert tensorboard_tags(tensorboard)[f"{runs}/ppo_demo"] == ["train/loss"]
    written = read_tensorboard_eval(out / "tensorboard" / "ppo_demo_eval")
    for tag in tags:
        assert tensorboard_scalars(tensorboard, f"{runs}/ppo_demo_eval", tag) == written[tag]
    assert [s for s, _ in written["eval/success_rate"]] == [ck.step for ck in CHECKPOINTS]


def test_the_demo_exports_its_cartpole_rollouts_as_a_loadable_minari_dataset(
    demo_run: tuple[Path, str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    import minari

    out, stdout = demo_run
    monkeypatch.setenv("MINARI_DATASETS_PATH", str((out / "datasets").resolve()))

    dataset = minari.load_dataset("rlmesh/cartpole-demo-v0")

    assert dataset.total_episodes == EPISODES * CONCURRENT_SESSIONS * len(CHECKPOINTS)
    assert f"MINARI_DATASETS_PATH={(out / 'datasets').resolve()}" in stdout


def test_the_demo_dataset_is_the_env_as_it_ran_and_names_every_checkpoint(
    demo_run: tuple[Path, str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    import minari

    from rlmesh_stream.infra.demo import MAX_STEPS

    out, _ = demo_run
    monkeypatch.setenv("MINARI_DATASETS_PATH", str((out / "datasets").resolve()))

    dataset = minari.load_dataset("rlmesh/cartpole-demo-v0")

    assert dataset.recover_environment().spec.max_episode_steps == MAX_STEPS
    models = {m["model_component_id"]
              for m in dataset.storage.get_episode_metadata(range(dataset.total_episodes))}
    assert len(models) == len(CHECKPOINTS)
    assert all(m in dataset.storage.metadata["algorithm_name"] for m in models)

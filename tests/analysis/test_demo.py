"""`rlmesh-stream demo`: real CartPole rollouts through the whole pipeline, on the real stack."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from infra.demo import CHECKPOINTS, demo
from schemas.config import StreamConfig

pytestmark = pytest.mark.stack

EPISODES = 2


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory, stack: object) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("demo")
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
                       "(WHERE status = 'completed') FROM episodes GROUP BY 1 ORDER BY 1")
    assert rows == [(ck.name, EPISODES, EPISODES) for ck in CHECKPOINTS]


def test_one_ended_session_per_checkpoint(demo_run: tuple[Path, str]) -> None:
    out, _ = demo_run
    assert _query(out, "SELECT status, COUNT(*) FROM sessions GROUP BY 1") == [
        ("ended", len(CHECKPOINTS))]


def test_the_producer_delivered_every_event_once(demo_run: tuple[Path, str]) -> None:
    out, _ = demo_run
    ((producers, gaps, duplicates),) = _query(
        out, "SELECT COUNT(*), SUM(gaps), SUM(duplicates) FROM delivery_producers")
    assert (producers, gaps, duplicates) == (1, 0, 0)


def test_the_episode_report_and_the_join_are_printed(demo_run: tuple[Path, str]) -> None:
    _, stdout = demo_run
    assert "Episodes per env and model" in stdout
    total = EPISODES * len(CHECKPOINTS)
    assert f"{total} of {total} episodes matched a training-log row" in stdout


def test_the_html_report_and_both_plots_are_written(demo_run: tuple[Path, str]) -> None:
    out, _ = demo_run
    for name in ("advisories.html", "eval_vs_training.png", "eval_vs_training.svg",
                 "training_log.jsonl"):
        assert (out / name).stat().st_size > 0, name

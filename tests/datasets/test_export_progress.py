"""The export's progress line counts what a user expects of an export: episodes exported and
skipped (and the steps exported), as the run's summary does, the decisions made at the end
of an `--until-end` run (a failed session's open episodes) included. It used to count the
`episode_completed` records read: episodes skipped counted as written, abandoned ones not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from rlmesh_stream.infra.cli import main
from rlmesh_stream.producer.simulator import simulate_fleet
from tests.datasets.rollouts import run_cartpole
from tests.publishing import close_delivered

pytestmark = pytest.mark.stack


@pytest.mark.parametrize("fmt", ["minari", "iceberg"])
def test_the_progress_line_counts_episodes_exported_and_skipped_as_the_summary_does(
    make_hooks, stream_config, tmp_path: Path, fmt: str,
) -> None:
    run_cartpole(make_hooks, [21, 22])
    run_cartpole(make_hooks, [23], wrapped=False)  # Minari skips it: no terminal observation
    hooks = make_hooks()
    simulate_fleet(hooks, sessions=3, lanes=2, episodes=2, seed=5, failure_rate=1.0,
                   env_id="CartPole-v1")  # failed sessions: open episodes decided at the end
    close_delivered(hooks)
    target = (["--out", str(tmp_path / "ds"), "--dataset-id", "rlmesh/progress-v0"]
              if fmt == "minari" else
              ["--catalog", f"sqlite:///{tmp_path / 'cat.db'}", "--table", "rl.progress"])

    run = CliRunner().invoke(main, [
        "export", "trajectories", "--format", fmt, *target, "--bootstrap",
        stream_config.bootstrap, "--registry-url", stream_config.registry_url,
        "--topic-prefix", stream_config.topic_prefix, "--from-beginning", "--until-end"])

    assert run.exit_code == 0, run.output
    summary = json.loads(run.stdout.splitlines()[0])
    skipped = sum(summary["episodes_skipped"].values())
    assert summary["episodes_skipped"].get("abandoned"), summary  # decided at the end
    assert run.stderr.splitlines()[-1].endswith(
        f"; exported {summary['episodes_exported']} episodes ({summary['steps_exported']} "
        f"steps), skipped {skipped}"), run.stderr

"""`to_d3rlpy` and `to_torchrl` on the demo's Minari export, in a Python with d3rlpy 2.8.1,
TorchRL 0.14.1 and torch (`RLMESH_STREAM_OFFLINE_RL_PYTHON`; .ci/run makes one; skipped
otherwise): DiscreteBC trained through `to_d3rlpy`, with a step count that trains, returns
at least three times a random policy's on the dataset's recovered env, and TorchRL's buffer
holds the episodes' own values."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from rlmesh_stream.infra.demo_cli import demo

pytestmark = [pytest.mark.stack, pytest.mark.slow]
OFFLINE_RL_PYTHON = os.environ.get("RLMESH_STREAM_OFFLINE_RL_PYTHON")
ROOT = Path(__file__).resolve().parents[2]
# the docs' recipe: 2 000 gradient steps in epochs of 500 (d3rlpy's n_steps_per_epoch
# defaults to 10 000, and fit runs n_steps // n_steps_per_epoch epochs: 0 for 5 000)
N_STEPS, STEPS_PER_EPOCH = 2000, 500


@pytest.mark.skipif(not OFFLINE_RL_PYTHON,
                    reason="RLMESH_STREAM_OFFLINE_RL_PYTHON (d3rlpy, torchrl) unset")
def test_discrete_bc_trained_through_to_d3rlpy_triples_a_random_policys_return(
    stack: Any, tmp_path: Path,
) -> None:
    run = CliRunner().invoke(demo, [
        "--episodes", "4", "--out", str(tmp_path / "demo"), "--no-start-stack",
        "--bootstrap", stack.bootstrap, "--registry-url", stack.registry_url])
    assert run.exit_code == 0, run.output + repr(run.exception)

    check = subprocess.run(
        [str(OFFLINE_RL_PYTHON), str(Path(__file__).with_name("offline_rl_check.py")),
         "rlmesh/cartpole-demo-v0", str(N_STEPS), str(STEPS_PER_EPOCH)],
        env={**os.environ, "MINARI_DATASETS_PATH": str(tmp_path / "demo" / "datasets"),
             "PYTHONPATH": str(ROOT)},
        cwd=tmp_path, capture_output=True, text=True, timeout=1200)
    assert check.returncode == 0, check.stderr[-3000:]
    got = json.loads(check.stdout.strip().splitlines()[-1])
    print("offline RL on the demo's export:", got)  # the figures docs/datasets.md gives

    assert got["aligned"]
    assert got["epochs_trained"] == N_STEPS // STEPS_PER_EPOCH
    assert got["bc_return"] >= 3 * got["random_return"]
    assert got["torchrl_transitions"] == got["steps"]
    assert got["torchrl_observations_equal"] and got["torchrl_sample_nonzero"]
    assert got["torchrl_rewards_sum"] == got["steps"]  # CartPole: 1 a step

"""The Minari export as a user types it: a relative --out, Minari's metadata options seen
through `minari show` and `minari.load_dataset`, ids without a namespace."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from rlmesh_stream.infra.cli import main
from rlmesh_stream.schemas.connection.config import StreamConfig
from tests.datasets.rollouts import run_cartpole

pytestmark = pytest.mark.stack


def _cli(config: StreamConfig, *args: str) -> tuple[int, str]:
    run = CliRunner().invoke(main, [
        "export", "trajectories", "--bootstrap", config.bootstrap, "--registry-url",
        config.registry_url, "--topic-prefix", config.topic_prefix, "--from-beginning",
        "--until-end", "--quiet", "--format", "minari", *args])
    return run.exit_code, run.output


def _load(out: Path, dataset_id: str):
    import minari

    os.environ["MINARI_DATASETS_PATH"] = str(out)
    return minari.load_dataset(dataset_id)


@pytest.mark.parametrize("layout", ["hdf5", "arrow"])
def test_a_relative_out_exports_and_exports_again(
    make_hooks, stream_config, tmp_path, monkeypatch, layout,
):
    monkeypatch.chdir(tmp_path)
    run_cartpole(make_hooks, [31])
    args = ("--out", "datasets", "--dataset-id", "rlmesh/cartpole-v0", "--minari-format",
            layout)

    first = _cli(stream_config, *args)
    run_cartpole(make_hooks, [32])
    again = _cli(stream_config, *args)

    assert first[0] == 0, first[1]
    assert again[0] == 0, again[1]
    assert "MINARI_DATASETS_PATH=datasets " in again[1]
    assert _load(tmp_path / "datasets", "rlmesh/cartpole-v0").total_episodes == 2


def test_metadata_options_are_what_minari_show_and_load_dataset_read(
    make_hooks, stream_config, tmp_path,
):
    result = run_cartpole(make_hooks, [33, 34])
    out = tmp_path / "ds"

    code, output = _cli(
        stream_config, "--out", str(out), "--dataset-id", "rlmesh/meta-v0",
        "--author", "Ada Lovelace", "--author-email", "ada@example.org",
        "--code-permalink", "https://example.org/rollouts/commit/abc123",
        "--algorithm-name", "PPO", "--description", "Balancing CartPole rollouts.",
        "--ref-min-score", "20", "--ref-max-score", "500")

    assert code == 0, output
    shown = subprocess.run(
        [str(Path(sys.executable).with_name("minari")), "show", "rlmesh/meta-v0"],
        env={**os.environ, "MINARI_DATASETS_PATH": str(out), "COLUMNS": "200"},
        capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    for expected in ("Ada Lovelace", "ada@example.org",
                     "https://example.org/rollouts/commit/abc123", "PPO",
                     "Balancing CartPole rollouts."):
        assert expected in shown.stdout, shown.stdout
    assert "unknown" not in shown.stdout

    import minari

    dataset = _load(out, "rlmesh/meta-v0")
    assert dataset.storage.metadata["author"] == {"Ada Lovelace"}
    assert dataset.storage.metadata["author_email"] == {"ada@example.org"}
    returns = np.array([e.steps for e in result.episodes], dtype=np.float64)
    np.testing.assert_allclose(minari.get_normalized_score(dataset, returns),
                               (returns - 20) / 480)


def test_without_metadata_options_nothing_is_made_up(make_hooks, stream_config, tmp_path):
    run_cartpole(make_hooks, [35])

    code, output = _cli(stream_config, "--out", str(tmp_path / "ds"), "--dataset-id",
                        "rlmesh/plain-v0")

    assert code == 0, output
    metadata = _load(tmp_path / "ds", "rlmesh/plain-v0").storage.metadata
    assert "author_email" not in metadata and "code_permalink" not in metadata
    assert metadata["algorithm_name"] == "rlmesh model numpy-policy"


def test_a_dataset_id_without_a_namespace_is_taken_as_minari_takes_it(
    make_hooks, stream_config, tmp_path,
):
    run_cartpole(make_hooks, [36])

    code, output = _cli(stream_config, "--out", str(tmp_path / "ds"), "--dataset-id",
                        "cartpole-v0")

    assert code == 0, output
    assert _load(tmp_path / "ds", "cartpole-v0").total_episodes == 1


def test_one_reference_score_alone_is_refused_by_name(tmp_path):
    run = CliRunner().invoke(main, ["export", "trajectories", "--out", str(tmp_path),
                                    "--format", "minari", "--ref-min-score", "1"])

    assert run.exit_code != 0
    assert "--ref-min-score and --ref-max-score go together" in run.output


def test_the_layout_help_does_not_send_torchrl_users_to_hdf5():
    run = CliRunner().invoke(main, ["export", "trajectories", "--help"])

    assert run.exit_code == 0
    assert "TorchRL" not in run.output
    assert "--author-email" in run.output and "--ref-max-score" in run.output

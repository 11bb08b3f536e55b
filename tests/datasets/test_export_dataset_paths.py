"""`--dataset-id` stays inside `--out`, and the exporter removes only what its own manifest
lists: a dataset id must not make it write or delete outside the directory it was given."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from click.testing import CliRunner

from rlmesh_stream.infra.cli import main


def _export(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["export", "trajectories", "--quiet", "--bootstrap",
                                       "127.0.0.1:1", "--connect-timeout", "1", "--until-end",
                                       *args])
    return result.exit_code, result.output


@pytest.mark.parametrize("dataset_id", [
    "../../../elsewhere/x-v0", "rlmesh/../../victim-v0", "rlmesh/./x-v0", "/abs/x-v0",
    "rlmesh//x-v0", "rlmesh/x.y-v0"])
def test_a_dataset_id_that_is_not_minaris_syntax_is_refused_and_nothing_written(
    tmp_path: Path, dataset_id: str,
) -> None:
    out = tmp_path / "a" / "b" / "out"

    code, output = _export("--out", str(out), "--format", "minari", "--dataset-id", dataset_id)

    assert code != 0
    assert output.strip().splitlines() == [
        f"Error: dataset id {dataset_id!r} is not [NAMESPACE/]NAME-vN "
        "(for example rlmesh/cartpole-v0, or rlmesh/{env}-v0 for one dataset per env)"]
    assert not (tmp_path / "a").exists()


def test_an_existing_minari_dataset_of_the_same_id_is_refused_and_kept_whole(
    tmp_path: Path,
) -> None:
    from minari.data_collector.episode_buffer import EpisodeBuffer
    from minari.dataset.minari_storage import MinariStorage

    data = tmp_path / "rlmesh" / "mine-v0" / "data"
    data.mkdir(parents=True)
    storage = MinariStorage.new(data, gym.spaces.Discrete(2), gym.spaces.Discrete(2))
    storage.update_episodes([EpisodeBuffer(observations=[np.int64(0), np.int64(1)],
                                           actions=[np.int64(1)], rewards=[1.0],
                                           terminations=[True], truncations=[False])])
    readme = tmp_path / "rlmesh" / "mine-v0" / "README.md"
    readme.write_text("my dataset")
    before = sorted(p.relative_to(tmp_path) for p in (tmp_path / "rlmesh").rglob("*"))

    code, output = _export("--out", str(tmp_path), "--format", "minari",
                           "--dataset-id", "rlmesh/mine-v0")

    assert code != 0
    assert output.strip() == (
        f"Error: {tmp_path / 'rlmesh' / 'mine-v0'} exists and was not written by this "
        "export (its manifest lists nothing): choose another --out or --dataset-id")
    assert sorted(p.relative_to(tmp_path) for p in (tmp_path / "rlmesh").rglob("*")) == before
    assert readme.read_text() == "my dataset"
    assert MinariStorage.read(data).total_episodes == 1

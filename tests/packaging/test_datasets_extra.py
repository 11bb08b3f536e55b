"""`pip install 'rlmesh-stream[datasets]'` is enough to load an exported dataset.

The wheel is installed with the `datasets` extra into a fresh virtual environment (pip's
cache serves the downloads), and there `minari.load_dataset` reads a dataset the exporter's
writer wrote in each of Minari's layouts (HDF5, its default, and Arrow): minari 0.5 imports
Pillow at the top of both storages, and HDF5 needs h5py.
"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from rlmesh_stream.consumers.datasets.minari_writer import MinariWriter
from rlmesh_stream.consumers.datasets.model import Episode, StepRow, Steps
from rlmesh_stream.producer.leaves import LeafCodec
from tests.packaging.test_wheel import _copy_sources

# builds the wheel and installs it into fresh venvs: minutes, so not in `make check`
pytestmark = pytest.mark.slow

OBS = LeafCodec(gym.spaces.Box(-1.0, 1.0, (3,), np.float32))
ACT = LeafCodec(gym.spaces.Discrete(2))


def _episode() -> Episode:
    return Episode(
        session_id="s", record_id="ep-000001",
        route={"env_id": "CartPole-v1", "env_component_id": "e", "model_component_id": "m",
               "lane": None},
        started={"seed": 5}, completed=None,
        observations=[np.full(3, t / 4, np.float32) for t in range(4)],
        actions=[np.int64(t % 2) for t in range(3)],
        steps=Steps.of_rows([StepRow(1.0, t == 2, False, {}) for t in range(3)]),
        obs_spec=OBS.spec, act_spec=ACT.spec, terminal_observation=True, abandoned=False,
        caution=False, reset_infos={})


@pytest.fixture(scope="module")
def datasets_env(tmp_path_factory: pytest.TempPathFactory) -> Path:
    source = _copy_sources(tmp_path_factory.mktemp("source"))
    out = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "--quiet", "--wheel-dir", str(out), str(source)],
                   check=True, capture_output=True, timeout=300)
    (wheel,) = out.glob("rlmesh_stream-*.whl")
    home = tmp_path_factory.mktemp("venv-datasets")
    venv.create(home, with_pip=True, clear=True)
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    subprocess.run([str(home / "bin" / "python"), "-m", "pip", "install", "--quiet",
                    f"{wheel}[datasets]"], check=True, capture_output=True, timeout=1200,
                   env=env)
    return home


@pytest.mark.parametrize("layout", ["hdf5", "arrow"])
def test_a_datasets_install_loads_an_exported_dataset(datasets_env: Path, tmp_path: Path,
                                                      layout: str) -> None:
    writer = MinariWriter(tmp_path, "rlmesh/packaged-v0", data_format=layout)
    writer.recover({}, 0)
    writer.write([_episode()], 1)

    done = subprocess.run(
        [str(datasets_env / "bin" / "python"), "-c",
         "import minari; d = minari.load_dataset('rlmesh/packaged-v0'); "
         "(e,) = d.iterate_episodes(); "
         "print(d.storage.metadata['data_format'], e.observations.shape, e.rewards.sum())"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
        env={**os.environ, "MINARI_DATASETS_PATH": str(tmp_path)})

    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [layout, "(4,", "3)", "3.0"]

"""The Minari dataset format: episodes appended to a Minari dataset through Minari's own
storage.

The dataset `DATASET_ID` under DIR (`MINARI_DATASETS_PATH=DIR`), written by
Minari's own storage (`MinariStorage.update_episodes`) in its default HDF5 layout
(`data/main_data.hdf5`, what `DataCollector` writes and TorchRL reads) or its Arrow
layout (one directory per episode). The HDF5 file is appended to as a copy renamed
over the committed one, so a crash never leaves it half-written. Metadata as
`DataCollector` writes it: the env spec (the producer's when `env_spec.py` finds it is
one the local Gymnasium registry would make, `--max-episode-steps` applied, else
Gymnasium's registration), `algorithm_name` naming every model,
`requirements`, per episode `rewards_sum/mean/std/min/max` beside our ids and seed;
infos when the producer sent them for the reset and every step. Like the Parquet writer
(`writers.py`), it appends one batch per commit and `recover(state)` removes what a crash
left beyond the committed state.
"""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from rlmesh_stream.consumers.datasets.env_spec import (
    MALFORMED,
    UNTRUSTED,
    SpecVetter,
    dataset_spec,
    spec_json,
)
from rlmesh_stream.consumers.datasets.manifest import DatasetError, write_atomically
from rlmesh_stream.consumers.datasets.minari_values import (
    episode_infos,
    minari_metadata,
    reward_stats,
    stack,
)
from rlmesh_stream.consumers.datasets.model import Episode
from rlmesh_stream.consumers.datasets.writers import episode_row
from rlmesh_stream.schemas.codec.leaves import gym_space

_HDF5_FILE = "main_data.hdf5"
# The state directory's record that this exporter is creating the Minari dataset: what a
# crashed first commit left behind may be removed; a dataset without it is not ours.
_CREATING = "minari-creating"


class MinariWriter:
    """Appends episodes to a Minari dataset through Minari's own storage API."""

    def __init__(self, root: Path, dataset_id: str, *, data_format: str = "hdf5",
                 max_episode_steps: int | None = None, state_dir: Path | None = None,
                 trust_env_spec: bool = False, metadata: dict[str, Any] | None = None,
                 per_env: bool = False) -> None:
        # Absolute: Minari's `get_size` joins each globbed file onto the data path again,
        # which doubles a relative path ('datasets/x/data/datasets/x/data/main_data.hdf5')
        self.root = root.resolve()
        self.dataset_id = dataset_id
        self.data_format = data_format
        self.max_episode_steps = max_episode_steps
        self.path = self.root / dataset_id / "data"
        self.state_dir = state_dir or root / ".rlmesh-export"
        # what the user set (--author, --ref-min-score, ...): over the defaults, every commit
        self.per_env = per_env  # one of the datasets of a `{env}` dataset id
        self.metadata = {k: v for k, v in (metadata or {}).items() if v not in (None, (), "")}
        self.storage: Any = None
        self.env_episodes: Counter[str] = Counter()  # episodes written per env id
        self.env_spec_source = ""  # the certificate's: where the dataset's env spec came from
        self._first_spec: str | None = None  # before the dataset exists: its first episode's
        self.vetter = SpecVetter(trust=trust_env_spec)
        # producers' env specs dropped (kept episodes, spec not taken), by reason, and the
        # first one's episode and why: the certificate's `env_specs_dropped`
        self.specs_dropped: dict[str, int] = {}
        self.spec_dropped_example = ""

    def recover(self, state: dict[str, Any], generation: int) -> None:
        marker = self._marker()
        if not state:  # nothing committed
            if marker.exists() and marker.read_text() == self.dataset_id:
                if self.path.parent.exists():  # a half-made dataset of our crashed first commit
                    shutil.rmtree(self.path.parent)
                marker.unlink()
            elif self.path.parent.exists():
                raise DatasetError(f"{self.path.parent} exists and was not written by this "
                                   "export (its manifest lists nothing): choose another "
                                   "--out or --dataset-id")
            return
        total = int(state["total_episodes"])
        self.env_spec_source = str(state.get("env_spec_source", ""))
        self.specs_dropped = dict(state.get("env_specs_dropped", {}))
        self.spec_dropped_example = str(state.get("env_spec_dropped_example", ""))
        self.env_episodes = Counter(state.get("env_episodes", {}))
        if (self.path / _HDF5_FILE).exists():
            self._truncate_hdf5(total)
        for child in self.path.iterdir():
            if child.is_dir() and child.name.isdigit() and int(child.name) >= total:
                shutil.rmtree(child)
        write_atomically(self.path / "metadata.json", json.dumps(state["metadata"]))
        self._open()

    def _truncate_hdf5(self, total: int) -> None:
        """Drop episodes beyond the committed ones (a crash after the file's rename)."""
        import h5py

        main = self.path / _HDF5_FILE
        with h5py.File(main, "r") as f:
            extra = [k for k in f if k.startswith("episode_") and int(k[8:]) >= total]
        if extra:
            work = _copy(main)
            with h5py.File(work, "a") as f:
                for k in extra:
                    del f[k]
            _replace(work, main)

    def _marker(self) -> Path:
        """The creation marker of this dataset (a dataset of a per-env export has its own:
        one state directory serves them all)."""
        return self.state_dir / (_CREATING if not self.per_env else
                                 f"{_CREATING}.{self.dataset_id.replace('/', '__')}")

    def _open(self) -> None:
        from minari.dataset.minari_storage import MinariStorage

        read = MinariStorage.read(self.path)
        held = read.metadata.get("data_format")
        if held != self.data_format:
            raise DatasetError(f"{self.path.parent} holds a Minari dataset in the {held} "
                               f"layout: pass --minari-format {held}")
        self.storage = _storage_class(self.data_format)(
            self.path, read.observation_space, read.action_space, jpeg_encoding=False)

    def _create(self, first: Episode) -> None:
        import minari
        from minari.dataset.minari_storage import MinariStorage

        self.state_dir.mkdir(parents=True, exist_ok=True)
        write_atomically(self._marker(), self.dataset_id)
        self.path.mkdir(parents=True, exist_ok=True)
        env_spec, self.env_spec_source = dataset_spec(
            first.env_spec, first.route["env_id"], self.max_episode_steps, self.vetter)
        storage = MinariStorage.new(self.path, observation_space=gym_space(first.obs_spec),
                                    action_space=gym_space(first.act_spec),
                                    env_spec=env_spec, data_format=self.data_format,
                                    jpeg_encoding=False)
        storage = _storage_class(self.data_format)(
            self.path, storage.observation_space, storage.action_space, jpeg_encoding=False)
        storage.update_metadata({
            "dataset_id": self.dataset_id, "minari_version": minari.__version__,
            "description": "Exported from the rlmesh event stream by rlmesh-stream "
                           "export trajectories (exactly once; see .rlmesh-export/).",
            "author": {"rlmesh-stream"},
            # what remaking a registered env needs; no tighter (d3rlpy 2.8.1 pins 1.0.0)
            "requirements": ["gymnasium>=1.0"],
        })
        self.storage = storage

    def write(self, episodes: list[Episode], generation: int) -> dict[str, Any]:
        from minari.data_collector.episode_buffer import EpisodeBuffer

        if episodes and self.storage is None:
            self._create(episodes[0])
        if self.storage is None:
            return {}
        obs_space, act_space = self.storage.observation_space, self.storage.action_space
        buffers: list[EpisodeBuffer] = []
        extra: list[dict[str, Any]] = []
        start = self.storage.total_episodes
        for e in episodes:
            if not e.terminal_observation:
                raise DatasetError("internal: a Minari episode needs its T+1 observations")
            rewards = np.asarray(e.steps.rewards, np.float64)
            buffers.append(EpisodeBuffer(
                id=start + len(buffers), seed=e.started.get("seed"),
                observations=stack(e.observations, obs_space),
                actions=stack(e.actions, act_space), rewards=list(rewards),
                terminations=e.steps.terminated.tolist(),
                truncations=e.steps.truncated.tolist(), infos=episode_infos(e) or {}))
            extra.append({**{k: v for k, v in episode_row(e).items()
                             if k not in ("observation_space", "action_space")
                             and v is not None}, **reward_stats(rewards)})
        if buffers:
            self._append(buffers, extra, start)
        self.env_episodes.update(e.route["env_id"] for e in episodes)
        models = sorted({*self.storage.metadata.get("rlmesh_models", []),
                         *(e.route["model_component_id"] for e in episodes)})
        self.storage.update_metadata({
            "rlmesh_models": models,
            "algorithm_name": "rlmesh model" + ("s " if len(models) > 1 else " ")
                              + ", ".join(models),
            **minari_metadata(self.metadata)})
        metadata = json.loads((self.path / "metadata.json").read_text())
        return {"total_episodes": self.storage.total_episodes, "metadata": metadata,
                "env_spec_source": self.env_spec_source,
                "env_specs_dropped": self.specs_dropped,
                "env_spec_dropped_example": self.spec_dropped_example,
                "env_episodes": dict(sorted(self.env_episodes.items()))}

    def _append(self, buffers: list[Any], extra: list[dict[str, Any]], start: int) -> None:
        storage = self.storage
        hdf5 = self.data_format == "hdf5"
        if hdf5:  # on a copy, renamed over the committed file once whole
            main = self.path / _HDF5_FILE
            storage._file_path = _copy(main)
        try:
            storage.update_episodes(buffers)
            storage.update_episode_metadata(extra, range(start, start + len(buffers)))
        finally:
            if hdf5:
                work, storage._file_path = storage._file_path, main
        if hdf5:
            _replace(work, main)
        storage.update_metadata({"dataset_size": storage.measured_size()})

    def accepts(self, e: Episode) -> str | None:
        """Why an episode cannot go into this dataset (None: it can)."""
        if not e.terminal_observation:
            return "no_terminal_observation"
        if self.storage is not None and (
                gym_space(e.obs_spec) != self.storage.observation_space
                or gym_space(e.act_spec) != self.storage.action_space):
            return "space_mismatch"
        if e.env_spec is not None:
            verdict = self.vetter.vet(e.env_spec, e.route["env_id"])
            if verdict.reason == MALFORMED:  # under which env it ran, nobody can tell
                return MALFORMED
            if verdict.reason == UNTRUSTED:  # the episode stays; its spec never runs
                self.specs_dropped[UNTRUSTED] = self.specs_dropped.get(UNTRUSTED, 0) + 1
                self.spec_dropped_example = self.spec_dropped_example or (
                    f"{e.session_id}/{e.record_id}: {verdict.detail}")
                e.env_spec = None
                return None
            spec = spec_json(verdict.spec, self.max_episode_steps)
            if self.storage is None:
                self._first_spec = self._first_spec or spec
                expected = self._first_spec
            else:
                expected = (self.storage.metadata.get("env_spec")
                            if self.env_spec_source.startswith("producer") else spec)
            if spec != expected:
                return "env_spec_mismatch"
        return None


def creating_markers(state_dir: Path | None, root: Path) -> list[str]:
    """The dataset ids of a per-env export whose creation is marked (a first commit of
    theirs may have been killed)."""
    folder = state_dir or root / ".rlmesh-export"
    return sorted(p.read_text() for p in folder.glob(f"{_CREATING}.*") if p.is_file())


def _copy(path: Path) -> Path:
    work = path.with_name(path.name + ".next")
    shutil.copyfile(path, work)
    return work


def _replace(work: Path, path: Path) -> None:
    fd = os.open(work, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(work, path)


def _storage_class(data_format: str) -> Any:
    """Minari's storage, but `dataset_size` measured once per commit: Minari walks every
    file of the dataset after each episode it adds (quadratic in episodes)."""
    from minari.dataset._storages import get_minari_storage

    base = get_minari_storage(data_format)

    class ExportStorage(base):  # type: ignore[misc,valid-type]
        def get_size(self) -> float:
            return float(self.metadata.get("dataset_size", 0.0))

        def measured_size(self) -> float:
            return float(base.get_size(self))

    return ExportStorage

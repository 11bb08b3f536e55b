"""The two dataset formats: Parquet (a documented layout) and Minari (its own storage).

Each writer appends one batch of released episodes per commit, returns the
state to keep in the manifest, and `recover(state)` removes whatever a crash
left behind beyond the committed state.

Parquet, under DIR (hive-partitioned by env, one file per commit and env; `<env>` is the
env id with characters other than letters, digits, `-_.` as `_`; the rows hold the
exact `env_id`):

    steps/env=<env>/part-<gen>_<n>.parquet      one row per step
    episodes/env=<env>/part-<gen>_0.parquet     one row per episode

Minari: the dataset `DATASET_ID` under DIR (`MINARI_DATASETS_PATH=DIR`), in
Minari's arrow storage (one directory per episode, written by Minari's own
`MinariStorage.update_episodes`), each episode's seed and ids in its metadata.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from rlmesh_stream.consumers.datasets.manifest import DatasetError, write_atomically
from rlmesh_stream.consumers.datasets.model import Episode
from rlmesh_stream.consumers.records import meta_json
from rlmesh_stream.schemas.codec.leaves import gym_space, leaves_of


def _arrow(values: list[Any]) -> pa.Array:
    """A column of decoded values: arrays as (flattened) lists, dicts as structs."""
    first = values[0]
    if isinstance(first, dict):
        return pa.StructArray.from_arrays([_arrow([v[k] for v in values]) for k in first],
                                          names=list(first))
    if isinstance(first, tuple):
        return pa.StructArray.from_arrays(
            [_arrow([v[i] for v in values]) for i in range(len(first))],
            names=[str(i) for i in range(len(first))])
    if isinstance(first, str):
        return pa.array(values, pa.string())
    array = np.stack([np.asarray(v) for v in values])
    if array.ndim == 1:
        return pa.array(array)
    flat = array.reshape(len(values), -1)
    return pa.FixedSizeListArray.from_arrays(pa.array(flat.reshape(-1)), flat.shape[1])


def _episode_row(e: Episode) -> dict[str, Any]:
    done = e.completed or {}
    return {
        "session_id": e.session_id, "episode_record_id": e.record_id,
        "episode_id": e.started.get("episode_id") or done.get("episode_id"),
        "env_id": e.route["env_id"], "env_component_id": e.route["env_component_id"],
        "model_component_id": e.route["model_component_id"], "lane": e.route["lane"],
        "env_index": e.started.get("env_index"), "seed": e.started.get("seed"),
        "trial_index": e.started.get("trial_index"), "steps": e.length,
        "total_reward": float(sum(s.reward for s in e.steps)),
        "terminated": done.get("terminated"), "truncated": done.get("truncated"),
        "success": done.get("success"), "terminal_observation": e.terminal_observation,
        "abandoned": e.abandoned, "caution": e.caution,
        "observation_space": e.obs_spec.SerializeToString(deterministic=True),
        "action_space": e.act_spec.SerializeToString(deterministic=True),
    }


class ParquetWriter:
    def __init__(self, root: Path) -> None:
        self.root = root

    def recover(self, state: dict[str, Any], generation: int) -> None:
        for part in list(self.root.glob("*/env=*/part-*.parquet")):
            if int(part.stem.split("-")[1].split("_")[0]) > generation:
                part.unlink()

    def write(self, episodes: list[Episode], generation: int) -> dict[str, Any]:
        by_env: dict[str, list[Episode]] = {}
        for e in episodes:
            by_env.setdefault(e.route["env_id"], []).append(e)
        for env_id, group in sorted(by_env.items()):
            folder = f"env={_safe(env_id)}"
            self._write("episodes", folder, generation,
                        pa.Table.from_pylist([_episode_row(e) for e in group]))
            for i, spec_group in enumerate(_by_spaces(group)):
                self._write("steps", folder, generation, _steps_table(spec_group), suffix=i)
        return {}

    def _write(self, kind: str, folder: str, generation: int, table: pa.Table,
               suffix: int = 0) -> None:
        path = self.root / kind / folder
        path.mkdir(parents=True, exist_ok=True)
        name = f"part-{generation:08d}_{suffix}.parquet"
        pq.write_table(table, path / name)


def _by_spaces(episodes: list[Episode]) -> list[list[Episode]]:
    groups: dict[tuple[bytes, bytes], list[Episode]] = {}
    for e in episodes:
        key = (e.obs_spec.SerializeToString(deterministic=True),
               e.act_spec.SerializeToString(deterministic=True))
        groups.setdefault(key, []).append(e)
    return list(groups.values())


def _steps_table(episodes: list[Episode]) -> pa.Table:
    cols: dict[str, list[Any]] = {k: [] for k in (
        "session_id", "episode_record_id", "model_component_id", "step", "reward",
        "terminated", "truncated", "infos")}
    obs: list[Any] = []
    nxt: list[Any] = []
    has_next: list[bool] = []
    acts: list[Any] = []
    for e in episodes:
        for t, s in enumerate(e.steps):
            cols["session_id"].append(e.session_id)
            cols["episode_record_id"].append(e.record_id)
            cols["model_component_id"].append(e.route["model_component_id"])
            cols["step"].append(t)
            cols["reward"].append(s.reward)
            cols["terminated"].append(s.terminated)
            cols["truncated"].append(s.truncated)
            cols["infos"].append(meta_json(s.infos))
            obs.append(e.observations[t])
            acts.append(e.actions[t])
            present = t + 1 < len(e.observations)
            has_next.append(present)
            nxt.append(e.observations[t + 1] if present else e.observations[t])
    data = {k: pa.array(v) for k, v in cols.items()}
    if obs:
        data["observation"] = _arrow(obs)
        data["action"] = _arrow(acts)
        next_col = _arrow(nxt)
        mask = pa.array([not p for p in has_next])
        data["next_observation"] = pc.if_else(mask, pa.nulls(len(nxt), next_col.type),
                                                      next_col)
    table = pa.table(data)
    spec = episodes[0]
    meta = {b"rlmesh.observation_shapes": json.dumps(
        {"/".join(map(str, leaf.path)): list(leaf.shape)
         for leaf in leaves_of(spec.obs_spec)}).encode(),
            b"rlmesh.action_shapes": json.dumps(
        {"/".join(map(str, leaf.path)): list(leaf.shape)
         for leaf in leaves_of(spec.act_spec)}).encode()}
    return table.replace_schema_metadata(meta)


def _safe(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)


class MinariWriter:
    """Appends episodes to a Minari dataset through Minari's own storage API."""

    def __init__(self, root: Path, dataset_id: str) -> None:
        self.root = root
        self.dataset_id = dataset_id
        self.path = root / dataset_id / "data"
        self.storage: Any = None

    def recover(self, state: dict[str, Any], generation: int) -> None:
        if not state:  # nothing committed: a half-made dataset from a crashed first commit
            if self.path.parent.exists():
                shutil.rmtree(self.path.parent)
            return
        total = int(state["total_episodes"])
        for child in self.path.iterdir():
            if child.is_dir() and child.name.isdigit() and int(child.name) >= total:
                shutil.rmtree(child)
        write_atomically(self.path / "metadata.json", json.dumps(state["metadata"]))
        self._open()

    def _open(self) -> None:
        from minari.dataset.minari_storage import MinariStorage

        read = MinariStorage.read(self.path)
        self.storage = _storage_class()(self.path, read.observation_space, read.action_space,
                                        jpeg_encoding=False)

    def _create(self, first: Episode) -> None:
        import minari
        from minari.dataset.minari_storage import MinariStorage

        self.path.mkdir(parents=True, exist_ok=True)
        storage = MinariStorage.new(self.path, observation_space=gym_space(first.obs_spec),
                                    action_space=gym_space(first.act_spec),
                                    env_spec=_env_spec(first.route["env_id"]),
                                    data_format="arrow", jpeg_encoding=False)
        storage = _storage_class()(self.path, storage.observation_space, storage.action_space,
                                   jpeg_encoding=False)
        storage.update_metadata({
            "dataset_id": self.dataset_id, "minari_version": minari.__version__,
            "algorithm_name": f"rlmesh model {first.route['model_component_id']}",
            "description": "Exported from the rlmesh event stream by rlmesh-stream "
                           "export trajectories (exactly once; see .rlmesh-export/).",
            "author": {"rlmesh-stream"}, "author_email": {"unknown"},
            "code_permalink": "https://pypi.org/project/rlmesh/",
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
            buffers.append(EpisodeBuffer(
                id=start + len(buffers), seed=e.started.get("seed"),
                observations=_stack(e.observations, obs_space),
                actions=_stack(e.actions, act_space),
                rewards=[s.reward for s in e.steps],
                terminations=[s.terminated for s in e.steps],
                truncations=[s.truncated for s in e.steps], infos={}))
            extra.append({k: v for k, v in _episode_row(e).items()
                          if k not in ("observation_space", "action_space")})
        if buffers:
            self.storage.update_episodes(buffers)
            self.storage.update_episode_metadata(extra, range(start, start + len(buffers)))
            self.storage.update_metadata({"dataset_size": self.storage.measured_size()})
        metadata = json.loads((self.path / "metadata.json").read_text())
        return {"total_episodes": self.storage.total_episodes, "metadata": metadata}

    def accepts(self, e: Episode) -> str | None:
        """Why an episode cannot go into this dataset (None: it can)."""
        if not e.terminal_observation:
            return "no_terminal_observation"
        if self.storage is not None and (
                gym_space(e.obs_spec) != self.storage.observation_space
                or gym_space(e.act_spec) != self.storage.action_space):
            return "space_mismatch"
        return None


def _env_spec(env_id: str) -> Any:
    """The Gymnasium registration of `env_id`, when it names one (so that Minari's
    `recover_environment()` works); None for an env Gymnasium does not know."""
    import gymnasium as gym

    try:
        return gym.spec(env_id)
    except Exception:  # gymnasium raises several error types for unknown or odd ids
        return None


def _storage_class() -> Any:
    """Minari's arrow storage, but `dataset_size` measured once per commit: Minari walks
    every file of the dataset after each episode it adds (quadratic in episodes)."""
    from minari.dataset._storages.arrow_storage import ArrowStorage

    class ExportStorage(ArrowStorage):  # type: ignore[misc]
        def get_size(self) -> float:
            return float(self.metadata.get("dataset_size", 0.0))

        def measured_size(self) -> float:
            return float(ArrowStorage.get_size(self))

    return ExportStorage


def _stack(values: list[Any], space: Any) -> Any:
    first = values[0]
    if isinstance(first, dict):
        return {k: _stack([v[k] for v in values], space[k]) for k in first}
    if isinstance(first, tuple):
        return tuple(_stack([v[i] for v in values], space[i]) for i in range(len(first)))
    if isinstance(first, str):
        return list(values)
    return np.stack([np.asarray(v) for v in values])

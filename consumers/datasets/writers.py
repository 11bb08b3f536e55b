"""The two dataset formats: Parquet (a documented layout) and Minari (its own storage).

Each writer appends one batch of released episodes per commit, returns the
state to keep in the manifest, and `recover(state)` removes whatever a crash
left behind beyond the committed state.

Parquet, under DIR (hive-partitioned by env, one file per commit and env; `<env>` is the
env id with characters other than letters, digits, `-_.` as `_`; the rows hold the
exact `env_id`):

    steps/env=<env>/part-<gen>_<n>.parquet      one row per step
    episodes/env=<env>/part-<gen>_0.parquet     one row per episode

Minari: the dataset `DATASET_ID` under DIR (`MINARI_DATASETS_PATH=DIR`), written by
Minari's own storage (`MinariStorage.update_episodes`) in its default HDF5 layout
(`data/main_data.hdf5`, what `DataCollector` writes and TorchRL reads) or its Arrow
layout (one directory per episode). The HDF5 file is appended to as a copy renamed
over the committed one, so a crash never leaves it half-written. Metadata as
`DataCollector` writes it: the env spec (the producer's when `env_spec.py` finds it is
one the local Gymnasium registry would make, `--max-episode-steps` applied, else
Gymnasium's registration), `algorithm_name` naming every model,
`requirements`, per episode `rewards_sum/mean/std/min/max` beside our ids and seed;
infos when the producer sent them for the reset and every step.
"""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

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
from rlmesh_stream.consumers.runtime.records import meta_json
from rlmesh_stream.schemas.codec.leaves import gym_space, leaves_of


def _arrow(values: list[Any]) -> pa.Array:
    """A column of decoded values: arrays as (flattened) lists, dicts as structs."""
    if isinstance(values, np.ndarray):
        return _column(values)
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


# The episode rows' types, fixed: inferred per file, a column every row of which is null
# (`success` of an env that never says) was typed null, and a reader of the whole layout
# (`pyarrow.dataset`, DuckDB) could not unify it with another env's bool.
EPISODE_SCHEMA = pa.schema([
    ("session_id", pa.string()), ("episode_record_id", pa.string()),
    ("episode_id", pa.string()), ("env_id", pa.string()), ("env_component_id", pa.string()),
    ("model_component_id", pa.string()), ("lane", pa.int64()), ("env_index", pa.int64()),
    ("seed", pa.int64()), ("trial_index", pa.int64()), ("steps", pa.int64()),
    ("total_reward", pa.float64()), ("terminated", pa.bool_()), ("truncated", pa.bool_()),
    ("success", pa.bool_()), ("terminal_observation", pa.bool_()), ("abandoned", pa.bool_()),
    ("caution", pa.bool_()), ("observation_space", pa.binary()),
    ("action_space", pa.binary()),
])


def _episode_row(e: Episode) -> dict[str, Any]:
    done = e.completed or {}
    return {
        "session_id": e.session_id, "episode_record_id": e.record_id,
        "episode_id": e.started.get("episode_id") or done.get("episode_id"),
        "env_id": e.route["env_id"], "env_component_id": e.route["env_component_id"],
        "model_component_id": e.route["model_component_id"], "lane": e.route["lane"],
        "env_index": e.started.get("env_index"), "seed": e.started.get("seed"),
        "trial_index": e.started.get("trial_index"), "steps": e.length,
        "total_reward": e.steps.total_reward(),
        "terminated": done.get("terminated"), "truncated": done.get("truncated"),
        "success": done.get("success"), "terminal_observation": e.terminal_observation,
        "abandoned": e.abandoned, "caution": e.caution,
        "observation_space": e.space_bytes()[0], "action_space": e.space_bytes()[1],
    }


class ParquetWriter:
    def __init__(self, root: Path) -> None:
        self.root = root

    @staticmethod
    def parts(root: Path) -> list[Path]:
        """The data files of a Parquet export under `root` (what `recover` may remove)."""
        return sorted(root.glob("*/env=*/part-*.parquet"))

    def recover(self, state: dict[str, Any], generation: int) -> None:
        for part in self.parts(self.root):
            if int(part.stem.split("-")[1].split("_")[0]) > generation:
                part.unlink()

    def write(self, episodes: list[Episode], generation: int) -> dict[str, Any]:
        by_env: dict[str, list[Episode]] = {}
        for e in episodes:
            by_env.setdefault(e.route["env_id"], []).append(e)
        for env_id, group in sorted(by_env.items()):
            folder = f"env={_safe(env_id)}"
            self._write("episodes", folder, generation,
                        pa.Table.from_pylist([_episode_row(e) for e in group],
                                             schema=EPISODE_SCHEMA))
            for i, spec_group in enumerate(_by_spaces(group)):
                steps = _steps_table(spec_group)
                # the exact env id on every step row too: a reader of the files alone
                # (Hugging Face `datasets`, a glob without hive partitioning) keeps the env
                steps = steps.append_column("env_id", pa.array([env_id] * steps.num_rows,
                                                                 pa.string()))
                self._write("steps", folder, generation, steps, suffix=i)
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
        key = e.space_bytes()
        groups.setdefault(key, []).append(e)
    return list(groups.values())


def _steps_table(episodes: list[Episode]) -> pa.Table:
    """One row per step: the scalar columns from the episodes' step arrays (concatenated,
    the per-episode ids repeated by Arrow), the observations and actions as one array
    per column when every episode holds them as arrays (vector sessions of one-leaf
    spaces), else value by value."""
    lengths = [e.length for e in episodes]
    if not sum(lengths):  # no step at all: untyped columns, infos typed string
        empty = {k: pa.array([]) for k in ("session_id", "episode_record_id",
                                           "model_component_id", "step", "reward",
                                           "terminated", "truncated")}
        return _with_shapes(pa.table({**empty, "infos": pa.array([], pa.string())}),
                            episodes[0])
    where = pa.array(np.repeat(np.arange(len(episodes), dtype=np.int64), lengths))

    def repeated(values: list[str]) -> pa.Array:
        return pa.array(values, pa.string()).take(where)

    def joined(arrays: list[np.ndarray], dtype: Any) -> np.ndarray:
        return np.concatenate(arrays) if arrays else np.zeros(0, dtype)

    data: dict[str, Any] = {
        "session_id": repeated([e.session_id for e in episodes]),
        "episode_record_id": repeated([e.record_id for e in episodes]),
        "model_component_id": repeated([e.route["model_component_id"] for e in episodes]),
        "reward": pa.array(joined([e.steps.rewards for e in episodes], np.float64)),
        "terminated": pa.array(joined([e.steps.terminated for e in episodes], bool)),
        "truncated": pa.array(joined([e.steps.truncated for e in episodes], bool)),
        # typed string even when every row is null (vector-env group steps have none)
        "infos": _infos_column(episodes, sum(lengths)),
    }
    starts = np.cumsum([0, *lengths[:-1]], dtype=np.int64)
    steps = np.arange(sum(lengths), dtype=np.int64) - np.repeat(starts, lengths)
    data = {"session_id": data["session_id"], "episode_record_id": data["episode_record_id"],
            "model_component_id": data["model_component_id"], "step": pa.array(steps),
            **{k: data[k] for k in ("reward", "terminated", "truncated", "infos")}}
    if all(isinstance(e.observations, np.ndarray) and isinstance(e.actions, np.ndarray)
           for e in episodes):
        obs, acts, nxt, has_next = _stacked_columns(episodes, lengths)
    else:
        obs, acts, nxt, has_next = _value_columns(episodes)
    data["observation"] = obs
    data["action"] = acts
    mask = pa.array(~has_next)
    data["next_observation"] = pc.if_else(mask, pa.nulls(len(has_next), nxt.type), nxt)
    return _with_shapes(pa.table(data), episodes[0])


def _with_shapes(table: pa.Table, spec: Episode) -> pa.Table:
    """The steps table with the spaces' leaf shapes in its schema metadata."""
    meta = {b"rlmesh.observation_shapes": json.dumps(
        {"/".join(map(str, leaf.path)): list(leaf.shape)
         for leaf in leaves_of(spec.obs_spec)}).encode(),
            b"rlmesh.action_shapes": json.dumps(
        {"/".join(map(str, leaf.path)): list(leaf.shape)
         for leaf in leaves_of(spec.act_spec)}).encode()}
    return table.replace_schema_metadata(meta)


def _infos_column(episodes: list[Episode], rows: int) -> pa.Array:
    """Each step's infos as JSON text (null where the producer sent none)."""
    if all(e.steps.infos is None for e in episodes):
        return pa.nulls(rows, pa.string())
    text: list[str | None] = []
    for e in episodes:
        infos = e.steps.infos
        text += [None] * e.length if infos is None else [meta_json(i) for i in infos]
    return pa.array(text, pa.string())


def _stacked_columns(episodes: list[Episode], lengths: list[int]
                     ) -> tuple[pa.Array, pa.Array, pa.Array, np.ndarray]:
    """Observation, action and next-observation columns from per-episode arrays."""
    obs, acts, nxt, has_next = [], [], [], []
    for e, n in zip(episodes, lengths, strict=True):
        o = e.observations
        obs.append(o[:n])
        acts.append(e.actions[:n])
        present = np.ones(n, dtype=bool)
        if len(o) > n:
            nxt.append(o[1:n + 1])
        else:  # no terminal observation: the last row's next is null
            nxt.append(np.concatenate([o[1:n], o[n - 1:n]]))
            present[n - 1:] = False
        has_next.append(present)
    return (_column(np.concatenate(obs)), _column(np.concatenate(acts)),
            _column(np.concatenate(nxt)), np.concatenate(has_next))


def _value_columns(episodes: list[Episode]) -> tuple[pa.Array, pa.Array, pa.Array, np.ndarray]:
    """The same columns from values of any space, step by step."""
    obs: list[Any] = []
    nxt: list[Any] = []
    has_next: list[bool] = []
    acts: list[Any] = []
    for e in episodes:
        for t in range(e.length):
            obs.append(e.observations[t])
            acts.append(e.actions[t])
            present = t + 1 < len(e.observations)
            has_next.append(present)
            nxt.append(e.observations[t + 1] if present else e.observations[t])
    return _arrow(obs), _arrow(acts), _arrow(nxt), np.asarray(has_next, dtype=bool)


def _column(array: np.ndarray) -> pa.Array:
    """A (rows, *shape) array as `_arrow` makes its column: flat values, or fixed-size
    lists of the flattened element."""
    if array.ndim == 1:
        return pa.array(array)
    flat = np.ascontiguousarray(array).reshape(len(array), -1)
    return pa.FixedSizeListArray.from_arrays(pa.array(flat.reshape(-1)), flat.shape[1])


def _safe(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)


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
            extra.append({**{k: v for k, v in _episode_row(e).items()
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

"""The Parquet dataset format (a documented layout), and the step and episode columns the
Parquet and Iceberg writers share; Minari's writer is `minari_writer.py`.

Each writer appends one batch of released episodes per commit, returns the
state to keep in the manifest, and `recover(state)` removes whatever a crash
left behind beyond the committed state.

Parquet, under DIR (hive-partitioned by env, one file per commit and env; `<env>` is the
env id with characters other than letters, digits, `-_.` as `_`; the rows hold the
exact `env_id`):

    steps/env=<env>/part-<gen>_<n>.parquet      one row per step
    episodes/env=<env>/part-<gen>_0.parquet     one row per episode
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from rlmesh_stream.consumers.datasets.model import Episode
from rlmesh_stream.consumers.runtime.records import meta_json
from rlmesh_stream.schemas.codec.leaves import leaves_of


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


def episode_row(e: Episode) -> dict[str, Any]:
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
                        pa.Table.from_pylist([episode_row(e) for e in group],
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

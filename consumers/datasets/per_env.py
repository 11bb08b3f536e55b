"""One Minari dataset per env: a `--dataset-id` template holding `{env}`.

A Minari dataset has one pair of spaces and one env spec (what `recover_environment()`
remakes), so a stream of several envs cannot be one dataset: mixed, its env spec is none
and the second env's episodes are skipped as `space_mismatch`. With `{env}` in the id
(`rlmesh/{env}-v0`) each env gets its own dataset, written by its own `MinariWriter`
in the same directory and committed in the same manifest; without it, a second env is
refused in one line naming every env and its episode count (`one_env`). An Iceberg steps
table holds every env whose observation and action columns have its types
(`column_types`).
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from rlmesh_stream.consumers.datasets.manifest import DatasetError
from rlmesh_stream.consumers.datasets.minari_writer import MinariWriter, creating_markers
from rlmesh_stream.consumers.datasets.model import Episode
from rlmesh_stream.schemas.codec.leaves import leaves_of
from rlmesh_stream.schemas.contract import events as ev

ENV_FIELD = "{env}"


def env_part(env_id: str) -> str:
    """An env id as a part of a Minari dataset id (letters, digits, `-` and `_`; every
    other character, `/` and `.` among them, as `_`): `ALE/Pong-v5` -> `ALE_Pong-v5`."""
    return re.sub(r"[^-_A-Za-z0-9]", "_", env_id) or "_"


def dataset_id_for(template: str, env_id: str) -> str:
    """The dataset id of `env_id` under `template` (the template itself without `{env}`)."""
    return template.replace(ENV_FIELD, env_part(env_id))


def one_env(template: str, held: Counter[str], episodes: list[Episode]) -> None:
    """A dataset id without `{env}` takes one env: a DatasetError naming every env and its
    episode count (the dataset's and this batch's) when `episodes` bring another."""
    counts = held + Counter(e.route["env_id"] for e in episodes)
    if len(counts) <= 1:
        return
    envs = ", ".join(f"{env}: {n} episodes" for env, n in sorted(counts.items()))
    raise DatasetError(
        f"the stream holds {len(counts)} envs ({envs}) and a Minari dataset holds one: pass "
        f"--env-id ENV, or a --dataset-id with {ENV_FIELD} for one dataset per env (e.g. "
        f"{template.rsplit('/', 1)[0] + '/' if '/' in template else ''}{ENV_FIELD}-v0)")


class MinariDatasets:
    """The writer of a `{env}` dataset id: one `MinariWriter` per env, one state."""

    def __init__(self, root: Path, template: str, **writer_options: Any) -> None:
        self.root = root
        self.template = template
        self.writer_options = writer_options
        self.writers: dict[str, MinariWriter] = {}  # env id -> its dataset's writer
        self.states: dict[str, dict[str, Any]] = {}  # env id -> its committed state

    def _writer(self, env_id: str) -> MinariWriter:
        writer = self.writers.get(env_id)
        if writer is None:
            writer = self.writers[env_id] = MinariWriter(
                self.root, dataset_id_for(self.template, env_id), per_env=True,
                **self.writer_options)
        return writer

    def recover(self, state: dict[str, Any], generation: int) -> None:
        self.writers, self.states = {}, {}
        datasets: dict[str, dict[str, Any]] = state.get("datasets", {})
        # a dataset whose first commit was killed: no state names it, its marker does
        committed = {dataset_id_for(self.template, env) for env in datasets}
        for dataset_id in creating_markers(self.writer_options.get("state_dir"), self.root):
            if dataset_id not in committed:
                MinariWriter(self.root, dataset_id, per_env=True,
                             **self.writer_options).recover({}, generation)
        for env_id, held in sorted(datasets.items()):
            self._writer(env_id).recover(held, generation)
            self.states[env_id] = held

    def accepts(self, e: Episode) -> str | None:
        return self._writer(e.route["env_id"]).accepts(e)

    def write(self, episodes: list[Episode], generation: int) -> dict[str, Any]:
        by_env: dict[str, list[Episode]] = {}
        for e in episodes:
            by_env.setdefault(e.route["env_id"], []).append(e)
        for env_id, group in sorted(by_env.items()):
            self.states[env_id] = self._writer(env_id).write(group, generation)
        return {"datasets": dict(sorted(self.states.items()))}

    @property
    def env_spec_source(self) -> dict[str, str]:
        """Per dataset id, where its env spec came from (the certificate's `env_spec`)."""
        return {w.dataset_id: w.env_spec_source or "none"
                for _, w in sorted(self.writers.items()) if w.storage is not None}

    @property
    def specs_dropped(self) -> dict[str, int]:
        """Producers' env specs not taken, by reason, over every env's dataset."""
        out: Counter[str] = Counter()
        for writer in self.writers.values():
            out.update(writer.specs_dropped)
        return dict(sorted(out.items()))

    @property
    def spec_dropped_example(self) -> str:
        return next((w.spec_dropped_example for _, w in sorted(self.writers.items())
                     if w.spec_dropped_example), "")

    def dataset_ids(self) -> list[str]:
        """The datasets written so far."""
        return sorted(w.dataset_id for w in self.writers.values() if w.storage is not None)


def column_types(obs_spec: bytes, act_spec: bytes) -> tuple[Any, ...]:
    """What fixes the types of the steps table's observation and action columns (as
    `writers._steps_table` builds them): per leaf its place, its dtype (text a string), and
    a scalar or a fixed-size list of its element count. Bounds and `n` do not."""
    key: list[Any] = []
    for raw in (obs_spec, act_spec):
        spec = ev.SpaceSpec()
        spec.ParseFromString(raw)
        key.append(tuple((leaf.path, "text" if leaf.kind == "text" else leaf.dtype.str,
                          None if leaf.shape == () else int(np.prod(leaf.shape)))
                         for leaf in leaves_of(spec)))
    return tuple(key)

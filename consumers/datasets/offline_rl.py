"""One-call loaders from a Minari dataset to the offline-RL libraries: `to_d3rlpy`, `to_torchrl`.

Both libraries' own Minari loaders are wrong on any Minari dataset, ours and Minari's own:
d3rlpy 2.8.1's `d3rlpy.datasets.get_minari` concatenates each episode's T+1 observations
against its T actions, so every episode after the first is shifted by one more step;
TorchRL 0.14.1's `MinariExperienceReplay` on an HDF5 dataset returns all-zero
observations, actions and rewards. These build the library's dataset from
`dataset.iterate_episodes()` instead, each transition's observation the one its action was
taken on.

Pure functions over a `minari.MinariDataset`; d3rlpy, torch, tensordict and torchrl are
imported when called (none is a dependency of this package: torch is several GB), so this
module imports with numpy alone.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def _episodes(dataset: Any) -> list[Any]:
    episodes = list(dataset.iterate_episodes())
    if not episodes:
        raise ValueError("the dataset holds no episodes")
    return episodes


def _flat(space: Any, values: Any, steps: int) -> np.ndarray:
    """A Box's observations as they are; any other space's flattened per step
    (`gymnasium.spaces.flatten`: a Dict or Tuple as one vector, a Discrete one-hot)."""
    from gymnasium import spaces

    if isinstance(space, spaces.Box):
        return np.asarray(values)[:steps]
    rows: list[Any] = []
    for t in range(steps):
        value = (values[t] if not isinstance(values, dict) else
                 {k: _index(v, t) for k, v in values.items()})
        rows.append(spaces.flatten(space, value))
    return np.stack(rows)


def _index(value: Any, t: int) -> Any:
    if isinstance(value, dict):
        return {k: _index(v, t) for k, v in value.items()}
    return value[t]


def to_d3rlpy(dataset: Any) -> Any:
    """A `d3rlpy.dataset.MDPDataset` of every episode: observation t with action t, reward
    t and the episode's end on its last step (`terminals` when it terminated, else
    `timeouts`, so episodes never run into each other). The terminal observation is not
    in an MDPDataset: one transition fewer per truncated episode in d3rlpy's own count.
    Discrete action spaces give `ActionSpace.DISCRETE` with the space's `n` actions."""
    import d3rlpy
    from gymnasium import spaces

    episodes = _episodes(dataset)
    obs_space, act_space = dataset.observation_space, dataset.action_space
    observations, actions, rewards, terminals, timeouts = [], [], [], [], []
    for e in episodes:
        steps = len(e.rewards)
        if steps == 0:
            continue
        observations.append(_flat(obs_space, e.observations, steps))
        actions.append(np.asarray(e.actions)[:steps])
        rewards.append(np.asarray(e.rewards, dtype=np.float32))
        done = np.asarray(e.terminations, dtype=np.float32)
        cut = np.zeros(steps, dtype=np.float32)
        if not done[-1]:  # truncated, or ended otherwise: its end is a timeout
            cut[-1] = 1.0
        terminals.append(done)
        timeouts.append(cut)
    discrete = isinstance(act_space, spaces.Discrete)
    acts = np.concatenate(actions)
    if discrete:
        acts = (acts - act_space.start).astype(np.int64)
    return d3rlpy.dataset.MDPDataset(
        observations=np.concatenate(observations).astype(np.float32), actions=acts,
        rewards=np.concatenate(rewards), terminals=np.concatenate(terminals),
        timeouts=np.concatenate(timeouts),
        action_space=(d3rlpy.ActionSpace.DISCRETE if discrete
                      else d3rlpy.ActionSpace.CONTINUOUS),
        action_size=int(act_space.n) if discrete else None)


def to_torchrl(dataset: Any, *, device: str = "cpu") -> Any:
    """A `torchrl.data.ReplayBuffer` (a `LazyTensorStorage` the size of the data) holding
    every transition in TorchRL's layout: `observation`, `action`, and under `next`:
    `observation`, `reward`, `terminated`, `truncated`, `done` (the last three `(N, 1)`
    bools, the reward `(N, 1)` float32). Dict observations are nested TensorDicts."""
    import torch
    from tensordict import TensorDict
    from torchrl.data import LazyTensorStorage, ReplayBuffer

    def tensor(value: Any, rows: slice) -> Any:
        if isinstance(value, dict):
            return {k: tensor(v, rows) for k, v in value.items()}
        return torch.as_tensor(np.asarray(value)[rows])

    parts = []
    for e in _episodes(dataset):
        steps = len(e.rewards)
        if steps == 0:
            continue
        terminated = torch.as_tensor(np.asarray(e.terminations, dtype=bool)).unsqueeze(-1)
        truncated = torch.as_tensor(np.asarray(e.truncations, dtype=bool)).unsqueeze(-1)
        parts.append(TensorDict({
            "observation": tensor(e.observations, slice(0, steps)),
            "action": tensor(e.actions, slice(0, steps)),
            "next": {
                "observation": tensor(e.observations, slice(1, steps + 1)),
                "reward": torch.as_tensor(np.asarray(e.rewards, dtype=np.float32)
                                          ).unsqueeze(-1),
                "terminated": terminated, "truncated": truncated,
                "done": terminated | truncated,
            },
        }, batch_size=[steps]))
    data = torch.cat(parts).to(device)
    buffer = ReplayBuffer(storage=LazyTensorStorage(len(data), device=device))
    buffer.extend(data)
    return buffer


__all__ = ["to_d3rlpy", "to_torchrl"]

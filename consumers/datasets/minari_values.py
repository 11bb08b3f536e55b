"""An exported episode's values as Minari's storage takes them: observations and actions
stacked per space, the infos as `DataCollector` stacks them, the per-episode reward
statistics it writes, and the dataset metadata options (authors as sets, reference scores
as floats). Apart from minari_writer.py, which appends them through Minari's storage API.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlmesh_stream.consumers.datasets.model import Episode


def minari_metadata(given: dict[str, Any]) -> dict[str, Any]:
    """The user's metadata options as Minari's storage holds them: authors and emails as
    sets (`DataCollector.create_dataset`), reference scores as floats (what
    `minari.get_normalized_score` reads)."""
    out = dict(given)
    for key in ("author", "author_email"):
        if key in out:
            out[key] = set(out[key])
    for key in ("ref_min_score", "ref_max_score"):
        if key in out:
            out[key] = float(out[key])
    return out


def reward_stats(rewards: np.ndarray) -> dict[str, float]:
    """DataCollector's per-episode metadata (`EpisodeMetadataCallback`)."""
    if not len(rewards):
        return {}
    return {"rewards_sum": float(rewards.sum()), "rewards_mean": float(rewards.mean()),
            "rewards_std": float(rewards.std()), "rewards_max": float(rewards.max()),
            "rewards_min": float(rewards.min())}


def episode_infos(e: Episode) -> dict[str, Any] | None:
    """The episode's T+1 infos (the reset's, then each step's) as DataCollector stacks them,
    when the producer sent every one of them with the same keys; None otherwise."""
    steps = e.steps.infos
    if steps is None and len(e.steps):
        return None
    values = [e.reset_infos, *(steps or ())]
    if any(i is None for i in values):
        return None
    return stack_infos(values)


def stack_infos(values: list[Any]) -> Any:
    first = values[0]
    if isinstance(first, dict):
        if any(not isinstance(v, dict) or v.keys() != first.keys() for v in values):
            return None
        out = {k: stack_infos([v[k] for v in values]) for k in first}
        return None if any(v is None for v in out.values()) else out
    if all(isinstance(v, bool) for v in values):
        return np.asarray(values)
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return np.asarray(values)  # ints with floats (a reset's 1, a step's 1.0): floats
    return None


def stack(values: Any, space: Any) -> Any:
    if isinstance(values, np.ndarray):  # stacked already (one array leaf)
        return values
    first = values[0]
    if isinstance(first, dict):
        return {k: stack([v[k] for v in values], space[k]) for k in first}
    if isinstance(first, tuple):
        return tuple(stack([v[i] for v in values], space[i]) for i in range(len(first)))
    if isinstance(first, str):
        return list(values)
    return np.stack([np.asarray(v) for v in values])

"""The env as it ran, seen by wrapping it: each episode's terminal observation (which
`RunHooks` never shows), the reset infos, and the inner env's `EnvSpec` as JSON.

The wrappers only stash what `reset`/`step` return, keyed by lane slot; the bridge
publishes it (docs/contract.md).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import numpy as np

log = logging.getLogger(__name__)


def _terminal_wrapper_base() -> Any:
    import gymnasium as gym

    return gym.Wrapper


class TerminalWrapper(_terminal_wrapper_base()):  # type: ignore[misc]
    """Keeps the observation a `step` returned when the episode ended, and the infos a
    `reset` returned (lane slot 0)."""

    def __init__(self, env: Any, stash: dict[int, Any], reset_infos: dict[int, Any]) -> None:
        super().__init__(env)
        self._stash = stash
        self._reset_infos = reset_infos

    def reset(self, **kwargs: Any) -> Any:
        result = self.env.reset(**kwargs)
        self._reset_infos[0] = result[1]
        return result

    def step(self, action: Any) -> Any:
        result = self.env.step(action)
        if result[2] or result[3]:
            self._stash[0] = result[0]
        return result


def _vector_wrapper_base() -> Any:
    import gymnasium as gym

    return gym.vector.VectorWrapper


class TerminalVectorWrapper(_vector_wrapper_base()):  # type: ignore[misc]
    """Keeps each lane's observation from the `step` that ended its episode (slot = lane)."""

    def __init__(self, env: Any, stash: dict[int, Any]) -> None:
        super().__init__(env)
        self._stash = stash

    def step(self, actions: Any) -> Any:
        result = self.env.step(actions)
        observations, _, terminated, truncated, _ = result
        for lane in np.flatnonzero(np.logical_or(terminated, truncated)):
            self._stash[int(lane)] = _lane(observations, int(lane))
        return result


def _lane(batched: Any, lane: int) -> Any:
    if isinstance(batched, dict):
        return {k: _lane(v, lane) for k, v in batched.items()}
    if isinstance(batched, tuple):
        return tuple(_lane(v, lane) for v in batched)
    return batched[lane]


def spec_json(spec: Any) -> str | None:
    """A Gymnasium `EnvSpec` as its JSON, as `gym.make` can rebuild it: a wrapper that
    records no constructor arguments (`kwargs` None: `gym.make` refuses it) is left out.
    None: no spec, or one JSON cannot hold."""
    if spec is None:
        return None
    kept = tuple(w for w in spec.additional_wrappers if w.kwargs is not None)
    if len(kept) != len(spec.additional_wrappers):
        log.info("env spec %s: wrappers gym.make cannot rebuild left out: %s", spec.id,
                 [w.name for w in spec.additional_wrappers if w.kwargs is None])
        spec = dataclasses.replace(spec, additional_wrappers=kept)
    try:
        return str(spec.to_json())
    except Exception:  # kwargs JSON cannot hold (a callable): the spec is not published
        log.warning("the env's spec cannot be published (not JSON): %s", spec.id)
        return None

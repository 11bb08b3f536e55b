"""Rollouts the dataset tests publish: seeded CartPole runs through the SDK bridge, a small
simulated fleet of another env (`sim/CartPole-v1`, other Box bounds), and Pendulum runs
(other observation and action column types: a Box action)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import rlmesh
from rlmesh.numpy import Model

from rlmesh_stream.producer.bridge import rlmesh_bridge
from rlmesh_stream.producer.hooks import KafkaRuntimeHooks
from rlmesh_stream.producer.manifest import Manifest
from rlmesh_stream.producer.simulator import simulate_fleet
from tests.publishing import close_delivered


def balancing(obs: np.ndarray) -> np.int64:
    """Push towards the pole's lean: a CartPole policy that lasts tens of steps."""
    return np.int64(0) if obs[2] < 0 else np.int64(1)


def run_cartpole(make_hooks: Callable[..., KafkaRuntimeHooks], seeds: list[int], *,
                 wrapped: bool = True, model: str = "numpy-policy",
                 policy: Callable[[np.ndarray], np.int64] = balancing) -> Any:
    """One session of CartPole-v1 episodes, one per seed, published and flushed."""
    hooks = make_hooks()
    bridge = rlmesh_bridge(hooks, env_id="CartPole-v1", model_component_id=model)
    env = gym.make("CartPole-v1")
    result = rlmesh.run(Model(policy), bridge.wrap(env) if wrapped else env, seeds=seeds,
                        hooks=bridge)
    close_delivered(hooks)
    return result


def run_pendulum(make_hooks: Callable[..., KafkaRuntimeHooks], seeds: list[int]) -> Any:
    """One session of Pendulum-v1 episodes (200 steps each, truncated), one per seed."""
    hooks = make_hooks()
    bridge = rlmesh_bridge(hooks, env_id="Pendulum-v1", model_component_id="numpy-torque")
    result = rlmesh.run(Model(lambda obs: np.clip([-2.0 * obs[2]], -2, 2).astype(np.float32)),
                        bridge.wrap(gym.make("Pendulum-v1")), seeds=seeds, hooks=bridge)
    close_delivered(hooks)
    return result


def run_simulator(make_hooks: Callable[..., KafkaRuntimeHooks], *, sessions: int = 2,
                  seed: int = 3) -> Manifest:
    """A simulated fleet (`sim/CartPole-v1`, 2-lane vector sessions, none failing)."""
    hooks = make_hooks()
    manifest = simulate_fleet(hooks, sessions=sessions, lanes=2, episodes=2, seed=seed,
                              failure_rate=0.0)
    close_delivered(hooks)
    return manifest


def exportable(manifest: Manifest) -> int:
    """The simulated episodes an export holds (completed, with a step)."""
    return sum(1 for e in manifest.episodes if e.status != "aborted" and e.steps > 0)

"""The export's memory for episodes that never end, with and without `--max-open-steps`.

No Kafka: the events a producer would publish for `--episodes` CartPole-shaped episodes
(Box(4) float32 observations, Discrete(2) actions) that run side by side and never end
(no `episode_completed`, no session end) go straight into the export's `Joiner`, step by
step, as its runtime hands them over; `tracemalloc` measures what the joiner holds every
`--every` steps (after a `release()`, as each checkpoint does). Once with no bound, once
with `--bound` steps per open episode. Printed: bytes held per step read, the peak, and
what is held at the end, for each.
"""

from __future__ import annotations

import argparse
import gc
import tracemalloc

import gymnasium as gym
import numpy as np

from rlmesh_stream.consumers.datasets.episodes import Filters, Joiner
from rlmesh_stream.producer.leaves import LeafCodec
from rlmesh_stream.schemas.contract import events as ev

ROUTE = ev.RuntimeEnvContext(env_id="CartPole-v1", env_component_id="e", model_component_id="m")
OBS = LeafCodec(gym.spaces.Box(-4.8, 4.8, (4,), np.float32))
ACT = LeafCodec(gym.spaces.Discrete(2))


def _events(episode: int, step: int) -> list[object]:
    """One step of one open episode, as the bridge publishes it (the reset first)."""
    record = f"ep-{episode:06d}"
    ids = dict(session_id=f"s{episode}", route=ROUTE, episode_id=f"e{episode}",
               episode_record_id=record)
    lanes = dict(episode_ids=[f"e{episode}"], episode_record_ids=[record], env_index=0)
    leaves = OBS.encode(np.random.default_rng(step).uniform(-1, 1, 4).astype(np.float32))
    out: list[object] = []
    if step == 0:
        out.append(ev.EpisodeStartedEvent(**ids, episode_index=1, env_index=0,
                                          started_from_auto_reset=False, seed=episode))
    out.append(ev.ObservationEmittedEvent(
        **ids, **lanes, step=step, is_reset=step == 0, num_envs=1,
        observation_space=OBS.spec, observation=leaves, raw_observation=leaves))
    if step > 0:
        out.append(ev.ActionReceivedEvent(**ids, **lanes, step=step - 1, action_space=ACT.spec,
                                          action=ACT.encode(1), raw_action=ACT.encode(1)))
        out.append(ev.StepCompletedEvent(
            **ids, step=step - 1, env_index=0, rewards=[1.0], terminated=[False],
            truncated=[False], autoreset_roll=[False], predict_ms=0.1, step_ms=0.1))
    return out


def measure(steps: int, episodes: int, every: int, bound: int | None) -> list[tuple[int, int]]:
    """(steps read, bytes held) every `every` steps of each of `episodes` open episodes."""
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    joiner = Joiner(Filters(max_open_steps=bound))
    offset = 0
    points = []
    for step in range(steps + 1):
        for episode in range(episodes):
            for event in _events(episode, step):
                joiner.add(event, ("t", 0, offset))
                offset += 1
        if step and step % every == 0:
            joiner.release()
            points.append((step * episodes, tracemalloc.get_traced_memory()[0] - base))
    tracemalloc.stop()
    return points


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20_000, help="steps per episode")
    parser.add_argument("--episodes", type=int, default=4, help="open episodes side by side")
    parser.add_argument("--every", type=int, default=5_000)
    parser.add_argument("--bound", type=int, default=5_000, help="--max-open-steps")
    args = parser.parse_args()
    for bound in (None, args.bound):
        points = measure(args.steps, args.episodes, args.every, bound)
        read, held = points[-1]
        print(f"--max-open-steps {bound or 'none':>6}: "
              + ", ".join(f"{n:,} steps {b / 1e6:.2f} MB" for n, b in points)
              + f"; {held / read:.0f} B per step read, peak {max(b for _, b in points) / 1e6:.2f}"
              " MB")


if __name__ == "__main__":
    main()

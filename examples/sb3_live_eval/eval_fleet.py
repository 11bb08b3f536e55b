"""The eval fleet: evaluates each new checkpoint the trainer saves, through rlmesh.

It watches the checkpoint folder; for each new `rl_model_<step>_steps.zip` it loads the
policy with `PPO.load`, runs `--episodes` CartPole-v1 episodes with `rlmesh.run` and the
rlmesh-stream bridge, and publishes them through `KafkaRuntimeHooks` with
`model_component_id` set to the checkpoint's name (`rl_model_5000_steps`): the name
`join --checkpoint-step 'rl_model_(\\d+)_steps'` reads the training step from. It runs in
a process of its own, as an eval machine would, and never touches the trainer.

Connection settings come from the environment (`RLMESH_STREAM_BOOTSTRAP`,
`RLMESH_STREAM_REGISTRY_URL`, `RLMESH_STREAM_TOPIC_PREFIX`). It stops on SIGTERM or
Ctrl-C after the checkpoint it is evaluating, or by itself once `--stop-after` names a
file that exists (the trainer's "done" marker) and every checkpoint is evaluated.
"""

from __future__ import annotations

import argparse
import re
import signal
import time
from pathlib import Path
from types import FrameType

import gymnasium as gym
import numpy as np
import rlmesh
import rlmesh.numpy as rn
from stable_baselines3 import PPO

from rlmesh_stream.producer import KafkaRuntimeHooks, rlmesh_bridge

CHECKPOINT = re.compile(r"rl_model_(\d+)_steps\.zip")
POLL_S = 1.0  # how often the folder is looked at; an evaluation takes seconds anyway


def new_checkpoints(folder: Path, done: set[str]) -> list[Path]:
    """Checkpoints not evaluated yet, by training step."""
    found = [p for p in folder.glob("rl_model_*_steps.zip")
             if CHECKPOINT.fullmatch(p.name) and p.stem not in done]
    return sorted(found, key=lambda p: int(CHECKPOINT.fullmatch(p.name).group(1)))  # type: ignore[union-attr]


def load(path: Path) -> PPO:
    """The checkpoint's policy; a zip SB3 is still writing is retried on the next poll."""
    return PPO.load(path, device="cpu")


def evaluate(hooks: KafkaRuntimeHooks, path: Path, episodes: int) -> list[float]:
    """`episodes` deterministic episodes of the checkpoint, published through the bridge."""
    model = load(path)

    def act(obs: np.ndarray) -> int:
        action, _ = model.predict(obs, deterministic=True)
        return int(action)

    bridge = rlmesh_bridge(hooks, env_id="CartPole-v1", model_component_id=path.stem)
    step = int(CHECKPOINT.fullmatch(path.name).group(1))  # type: ignore[union-attr]
    result = rlmesh.run(rn.Model(act), bridge.wrap(gym.make("CartPole-v1")),
                        episodes=episodes, seeds=[step + e for e in range(episodes)],
                        hooks=bridge)
    return [float(e.steps) for e in result.episodes]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoints", type=Path, default=Path("checkpoints"))
    parser.add_argument("--episodes", type=int, default=5, help="eval episodes per checkpoint")
    parser.add_argument("--spool", default="spool", help="where events wait if Kafka is down")
    parser.add_argument("--stop-after", type=Path,
                        help="exit once this file exists and every checkpoint is evaluated")
    args = parser.parse_args()

    stopping = False

    def stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    done: set[str] = set()
    with KafkaRuntimeHooks.from_env(spool_dir=args.spool) as hooks:
        while not stopping:
            trainer_done = args.stop_after is not None and args.stop_after.exists()
            todo = new_checkpoints(args.checkpoints, done)
            for path in todo:
                if stopping:
                    break
                try:
                    lengths = evaluate(hooks, path, args.episodes)
                except (OSError, ValueError, KeyError) as exc:  # a zip still being written
                    print(f"eval: {path.name} not readable yet ({exc}); retrying", flush=True)
                    break
                done.add(path.stem)
                print(f"eval: {path.stem}: {len(lengths)} episodes, "
                      f"mean return {np.mean(lengths):.1f}", flush=True)
            if trainer_done and not new_checkpoints(args.checkpoints, done):
                break
            time.sleep(POLL_S)
    print(f"eval: stopped after {len(done)} checkpoints; hook stats {hooks.stats()}", flush=True)


if __name__ == "__main__":
    main()

"""The trainer: Stable-Baselines3 PPO on CartPole-v1, as an SB3 user runs it.

It logs to TensorBoard (`runs/PPO_1`, `train/loss` once per rollout of 2048 steps) and
saves a checkpoint every `--save-freq` steps with SB3's `CheckpointCallback`
(`checkpoints/rl_model_<step>_steps.zip`). Nothing here knows about rlmesh-stream: the
eval fleet picks up the checkpoints, and `join --follow` reads the TensorBoard log.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import CheckpointCallback


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timesteps", type=int, default=30_000)
    parser.add_argument("--save-freq", type=int, default=5_000)
    parser.add_argument("--runs", default="runs", help="TensorBoard log directory")
    parser.add_argument("--checkpoints", default="checkpoints")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--done-file", type=Path,
                        help="created when training ends (the eval fleet's cue to finish)")
    args = parser.parse_args()

    model = PPO("MlpPolicy", "CartPole-v1", tensorboard_log=args.runs, seed=args.seed,
                device="cpu", verbose=0)
    checkpoints = CheckpointCallback(save_freq=args.save_freq, save_path=args.checkpoints,
                                     name_prefix="rl_model")
    # tb_log_name="PPO": SB3 writes runs/PPO_1 (PPO_2, ... if earlier runs are there).
    model.learn(total_timesteps=args.timesteps, callback=checkpoints, tb_log_name="PPO")
    print(f"trained {model.num_timesteps} timesteps", flush=True)
    if args.done_file is not None:
        args.done_file.touch()


if __name__ == "__main__":
    main()

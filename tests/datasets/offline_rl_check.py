"""Run in a Python with d3rlpy 2.8.1, torchrl and minari (`RLMESH_STREAM_OFFLINE_RL_PYTHON`):
load an exported Minari dataset, build d3rlpy's and TorchRL's datasets with
`to_d3rlpy` / `to_torchrl`, train DiscreteBC as docs/datasets.md says, and evaluate it
and a random policy on the dataset's recovered env. Prints one JSON line.

    MINARI_DATASETS_PATH=DIR python offline_rl_check.py DATASET_ID N_STEPS STEPS_PER_EPOCH
"""

from __future__ import annotations

import json
import sys
from typing import Any

import numpy as np

EVAL_SEEDS = range(1000, 1020)


def _mean_return(env: Any, act: Any) -> float:
    returns = []
    for seed in EVAL_SEEDS:
        obs, _ = env.reset(seed=seed)
        env.action_space.seed(seed)
        total, done = 0.0, False
        while not done:
            obs, reward, terminated, truncated, _ = env.step(act(obs))
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    return float(np.mean(returns))


def main(dataset_id: str, n_steps: int, steps_per_epoch: int) -> dict[str, Any]:
    import d3rlpy
    import minari
    import torch

    from rlmesh_stream.consumers.datasets.offline_rl import to_d3rlpy, to_torchrl

    d3rlpy.seed(0)
    # one thread: the net is tiny, and on a shared 2-core machine torch's default thread
    # pool made each gradient step take 0.4 s instead of milliseconds
    torch.set_num_threads(1)
    ds = minari.load_dataset(dataset_id)
    episodes = list(ds.iterate_episodes())

    # the recipe of docs/datasets.md
    data = to_d3rlpy(ds)
    bc = d3rlpy.algos.DiscreteBCConfig().create(device="cpu")
    fitted = bc.fit(data, n_steps=n_steps, n_steps_per_epoch=steps_per_epoch,
                    show_progress=False, logger_adapter=d3rlpy.logging.NoopAdapterFactory())
    env = ds.recover_environment()

    aligned = len(data.episodes) == len(episodes) and all(
        np.array_equal(d.observations, m.observations[:-1].astype(np.float32))
        and np.array_equal(d.actions.reshape(-1), m.actions)
        for d, m in zip(data.episodes, episodes, strict=True))
    bc_return = _mean_return(env, lambda obs: int(bc.predict(obs[None].astype(np.float32))[0]))
    random_return = _mean_return(env, lambda obs: env.action_space.sample())

    rb = to_torchrl(ds)
    stored = rb[:]
    expected_obs = np.concatenate([m.observations[:-1] for m in episodes])
    batch = rb.sample(256)
    return {
        "episodes": len(episodes), "transitions": int(data.transition_count),
        "steps": int(sum(len(m.rewards) for m in episodes)), "aligned": aligned,
        "epochs_trained": len(fitted), "gradient_steps": n_steps,
        "bc_return": bc_return, "random_return": random_return,
        "max_episode_steps": env.spec.max_episode_steps if env.spec else None,
        "torchrl_transitions": len(rb),
        "torchrl_observations_equal": bool(np.array_equal(
            stored["observation"].numpy(), expected_obs)),
        "torchrl_rewards_sum": float(stored["next", "reward"].sum()),
        "torchrl_sample_nonzero": bool(torch.count_nonzero(batch["observation"]) > 0),
    }


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))))

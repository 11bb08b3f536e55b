"""The docs' offline-RL recipes run on an export: d3rlpy's DiscreteBC and a TorchRL buffer.

    MINARI_DATASETS_PATH=DIR python benchmarks/check_offline_rl.py DATASET_ID [--steps N]

Outside the test run: it needs torch, d3rlpy and torchrl (`pip install d3rlpy torchrl`,
several GB). On a Minari export of a discrete-action env (the `make demo` CartPole one):

1. builds d3rlpy's `MDPDataset` from the episodes, each without its terminal observation
   (d3rlpy 2.8.1's `get_minari` concatenates T+1 observations against T actions), checks
   it holds every transition, trains `DiscreteBC` and evaluates it on the dataset's
   `recover_environment()` (the env as it ran: its step limit) against a random policy;
2. fills a TorchRL `ReplayBuffer` from the episodes (torchrl 0.14.1's
   `MinariExperienceReplay` returns all-zero data) and checks a sample against the data.

Prints one JSON line: transitions, the two mean returns, the TorchRL check.
"""

from __future__ import annotations

import argparse
import json

import minari
import numpy as np


def mdp_dataset(episodes: list) -> object:
    import d3rlpy

    def cat(field):  # type: ignore[no-untyped-def]
        return np.concatenate([field(e) for e in episodes])

    return d3rlpy.dataset.MDPDataset(
        observations=cat(lambda e: e.observations[:-1]), actions=cat(lambda e: e.actions),
        rewards=cat(lambda e: e.rewards), terminals=cat(lambda e: e.terminations),
        timeouts=cat(lambda e: e.truncations), action_space=d3rlpy.ActionSpace.DISCRETE)


def mean_return(env: object, act, episodes: int, seed: int) -> float:  # type: ignore[no-untyped-def]
    total = []
    for i in range(episodes):
        obs, _ = env.reset(seed=seed + i)  # type: ignore[attr-defined]
        done, ret = False, 0.0
        while not done:
            obs, reward, terminated, truncated, _ = env.step(act(obs))  # type: ignore[attr-defined]
            ret += float(reward)
            done = terminated or truncated
        total.append(ret)
    return float(np.mean(total))


def torchrl_buffer(episodes: list) -> tuple[object, object]:
    import torch
    from tensordict import TensorDict
    from torchrl.data import LazyTensorStorage, ReplayBuffer

    def t(a):  # type: ignore[no-untyped-def]
        return torch.as_tensor(np.asarray(a))

    parts = [TensorDict({
        "observation": t(e.observations[:-1]), "action": t(e.actions),
        ("next", "observation"): t(e.observations[1:]),
        ("next", "reward"): t(e.rewards).float().unsqueeze(-1),
        ("next", "terminated"): t(e.terminations).unsqueeze(-1),
        ("next", "truncated"): t(e.truncations).unsqueeze(-1),
        ("next", "done"): t(e.terminations | e.truncations).unsqueeze(-1),
    }, batch_size=[len(e.actions)]) for e in episodes]
    data = torch.cat(parts)
    buffer = ReplayBuffer(storage=LazyTensorStorage(len(data)))
    buffer.extend(data)
    return buffer, data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset_id")
    parser.add_argument("--steps", type=int, default=5000, help="DiscreteBC gradient steps")
    parser.add_argument("--eval-episodes", type=int, default=20)
    args = parser.parse_args()

    import d3rlpy

    dataset = minari.load_dataset(args.dataset_id)
    episodes = list(dataset.iterate_episodes())
    transitions = sum(len(e.actions) for e in episodes)
    mdp = mdp_dataset(episodes)
    # d3rlpy keeps a truncated episode's last step only as an observation (its next
    # observation, the terminal one, is not in an MDPDataset): one transition fewer each
    truncated = sum(not bool(e.terminations[-1]) for e in episodes)
    assert mdp.transition_count == transitions - truncated, (mdp.transition_count, transitions)
    d3rlpy.seed(0)
    bc = d3rlpy.algos.DiscreteBCConfig().create(device="cpu:0")
    bc.fit(mdp, n_steps=args.steps, n_steps_per_epoch=args.steps, show_progress=False,
           save_interval=args.steps + 1, logger_adapter=d3rlpy.logging.NoopAdapterFactory())
    env = dataset.recover_environment()
    rng = np.random.default_rng(0)
    bc_return = mean_return(env, lambda o: int(bc.predict(o[None])[0]), args.eval_episodes, 1000)
    random_return = mean_return(env, lambda o: int(rng.integers(env.action_space.n)),
                                args.eval_episodes, 1000)

    buffer, data = torchrl_buffer(episodes)
    sample = buffer.sample(256)
    torchrl_ok = bool(sample["observation"].abs().sum() > 0) and len(data) == transitions

    print(json.dumps({"episodes": len(episodes), "transitions": transitions,
                      "max_episode_steps": env.spec.max_episode_steps,
                      "discrete_bc_mean_return": bc_return,
                      "random_mean_return": random_return, "torchrl_buffer_ok": torchrl_ok}))


if __name__ == "__main__":
    main()

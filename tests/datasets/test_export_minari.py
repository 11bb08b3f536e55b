"""The Minari export is the env as it ran, in Minari's own layouts, with DataCollector's
metadata: what offline-RL libraries load as it is."""

from __future__ import annotations

import os
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import rlmesh
from rlmesh.numpy import Model

from rlmesh_stream.producer.bridge import rlmesh_bridge
from rlmesh_stream.producer.simulator import simulate_fleet

pytestmark = pytest.mark.stack


def _balancing(obs: np.ndarray) -> np.int64:
    """Holds the pole past 200 steps from most seeds (so a 200-step limit truncates)."""
    return np.int64(obs[2] + 0.5 * obs[3] > 0)


def _leaning(obs: np.ndarray) -> np.int64:
    return np.int64(obs[2] > 0)


def _run(make_hooks, seeds, *, policy=_balancing, model="numpy-policy", limit=200):
    hooks = make_hooks()
    bridge = rlmesh_bridge(hooks, env_id="CartPole-v1", model_component_id=model)
    env = gym.make("CartPole-v1", max_episode_steps=limit)
    result = rlmesh.run(Model(policy), bridge.wrap(env), seeds=seeds, hooks=bridge)
    hooks.flush(15)
    return result


def _load(out: Path, dataset_id: str):
    import minari

    os.environ["MINARI_DATASETS_PATH"] = str(out)
    return minari.load_dataset(dataset_id)


def test_a_200_step_cartpole_run_recovers_its_env_and_replays_every_step_tuple(
    make_hooks, export, tmp_path,
):
    result = _run(make_hooks, [1, 2, 3, 4], policy=_balancing)
    _run(make_hooks, [5, 6], policy=_leaning)

    sink = export(tmp_path / "ds", "minari", "rlmesh/cartpole200-v0")
    dataset = _load(tmp_path / "ds", "rlmesh/cartpole200-v0")

    env = dataset.recover_environment()
    assert env.spec.max_episode_steps == 200
    assert any(x.truncated and x.steps == 200 for x in result.episodes)
    metas = list(dataset.storage.get_episode_metadata(range(dataset.total_episodes)))
    assert dataset.total_episodes == 6
    for episode, meta in zip(dataset.iterate_episodes(), metas, strict=True):
        obs, _ = env.reset(seed=meta["seed"])
        replayed = [obs]
        tuples = []
        for action in episode.actions:
            obs, reward, terminated, truncated, _ = env.step(int(action))
            replayed.append(obs)
            tuples.append((reward, terminated, truncated))
        assert np.stack(replayed).tobytes() == episode.observations.tobytes()
        assert tuples == list(zip(episode.rewards.tolist(), episode.terminations.tolist(),
                                  episode.truncations.tolist(), strict=True))
    assert sink.store.committed.certificate["env_spec"] == "producer"


def test_max_episode_steps_overrides_the_producers_step_limit(make_hooks, export, tmp_path):
    _run(make_hooks, [7])

    sink = export(tmp_path / "ds", "minari", "rlmesh/capped-v0", max_episode_steps=150)

    dataset = _load(tmp_path / "ds", "rlmesh/capped-v0")
    assert dataset.recover_environment().spec.max_episode_steps == 150
    assert sink.store.committed.certificate["env_spec"] == "producer, --max-episode-steps"


def test_without_a_producers_spec_the_certificate_says_registry_default(
    make_hooks, export, tmp_path,
):
    hooks = make_hooks()
    simulate_fleet(hooks, sessions=1, lanes=1, episodes=2, seed=1, failure_rate=0.0,
                   env_id="CartPole-v1")
    hooks.flush(15)

    sink = export(tmp_path / "ds", "minari", "rlmesh/sim-v0")

    assert sink.store.committed.certificate["env_spec"] == "registry default"
    assert _load(tmp_path / "ds", "rlmesh/sim-v0").recover_environment().spec.max_episode_steps \
        == gym.spec("CartPole-v1").max_episode_steps


def test_the_default_layout_is_minaris_hdf5_and_arrow_holds_the_same_episodes(
    make_hooks, export, tmp_path,
):
    _run(make_hooks, [8, 9], policy=_leaning)

    export(tmp_path / "h5", "minari", "rlmesh/layout-v0")
    export(tmp_path / "arrow", "minari", "rlmesh/layout-v0", minari_format="arrow")

    assert (tmp_path / "h5" / "rlmesh" / "layout-v0" / "data" / "main_data.hdf5").is_file()
    h5 = _load(tmp_path / "h5", "rlmesh/layout-v0")
    arrow = _load(tmp_path / "arrow", "rlmesh/layout-v0")
    assert (h5.storage.metadata["data_format"], arrow.storage.metadata["data_format"]) == (
        "hdf5", "arrow")
    for a, b in zip(h5.iterate_episodes(), arrow.iterate_episodes(), strict=True):
        for field in ("observations", "actions", "rewards", "terminations", "truncations"):
            assert getattr(a, field).tobytes() == getattr(b, field).tobytes()


def test_metadata_is_what_data_collector_writes_and_names_every_model(
    make_hooks, export, tmp_path,
):
    _run(make_hooks, [10], policy=_leaning, model="ckpt-a")
    _run(make_hooks, [11], policy=_leaning, model="ckpt-b")

    export(tmp_path / "ds", "minari", "rlmesh/meta2-v0")
    dataset = _load(tmp_path / "ds", "rlmesh/meta2-v0")

    metadata = dataset.storage.metadata
    assert "ckpt-a" in metadata["algorithm_name"] and "ckpt-b" in metadata["algorithm_name"]
    assert metadata["requirements"] and metadata["requirements"][0].startswith("gymnasium>=")
    metas = list(dataset.storage.get_episode_metadata(range(dataset.total_episodes)))
    for episode, meta in zip(dataset.iterate_episodes(), metas, strict=True):
        rewards = episode.rewards
        assert (meta["rewards_sum"], meta["rewards_mean"], meta["rewards_std"],
                meta["rewards_min"], meta["rewards_max"]) == (
            float(rewards.sum()), float(rewards.mean()), float(rewards.std()),
            float(rewards.min()), float(rewards.max()))


def test_infos_the_producer_sent_are_exported_reset_first(make_hooks, export, tmp_path):
    hooks = make_hooks()
    bridge = rlmesh_bridge(hooks, env_id="FrozenLake-v1", model_component_id="m")
    env = gym.make("FrozenLake-v1", is_slippery=False)
    rlmesh.run(Model(lambda obs: np.int64(2)), bridge.wrap(env), seeds=[3], hooks=bridge)
    hooks.flush(15)

    export(tmp_path / "ds", "minari", "rlmesh/lake-v0")
    (episode,) = _load(tmp_path / "ds", "rlmesh/lake-v0").iterate_episodes()

    replay = gym.make("FrozenLake-v1", is_slippery=False)
    _, info = replay.reset(seed=3)
    probs = [info["prob"]]
    for action in episode.actions:
        probs.append(replay.step(int(action))[4]["prob"])
    assert episode.infos["prob"].tolist() == probs
    assert "rlmesh.env_spec" not in episode.infos


def test_episodes_run_under_another_env_spec_are_skipped_counted(make_hooks, export, tmp_path):
    _run(make_hooks, [12], policy=_leaning, limit=200)
    _run(make_hooks, [13], policy=_leaning, limit=100)

    sink = export(tmp_path / "ds", "minari", "rlmesh/twospecs-v0")

    cert = sink.store.committed.certificate
    assert (cert["episodes_exported"], cert["episodes_skipped"]) == (
        1, {"env_spec_mismatch": 1})


def test_a_dataset_in_the_other_layout_is_refused_in_one_line(make_hooks, export, tmp_path):
    from rlmesh_stream.consumers.datasets.manifest import DatasetError

    _run(make_hooks, [14], policy=_leaning)
    export(tmp_path / "ds", "minari", "rlmesh/arrow-v0", minari_format="arrow")

    with pytest.raises(DatasetError, match="holds a Minari dataset in the arrow layout: "
                                           "pass --minari-format arrow"):
        export(tmp_path / "ds", "minari", "rlmesh/arrow-v0")

"""A seeded CartPole run through the bridge, exported, is the run: replayable bit for bit."""

from __future__ import annotations

import os
import time
from pathlib import Path

import duckdb
import gymnasium as gym
import numpy as np
import pyarrow.dataset as pads
import pytest
import rlmesh
from rlmesh.numpy import Model

from rlmesh_stream.producer.bridge import rlmesh_bridge

pytestmark = pytest.mark.stack

SEEDS = [11, 12, 13]


def _policy(obs: np.ndarray) -> np.int64:
    return np.int64(0) if obs[2] < 0 else np.int64(1)


def _run_cartpole(make_hooks, seeds=SEEDS, *, wrapped: bool = True):
    hooks = make_hooks()
    bridge = rlmesh_bridge(hooks, env_id="CartPole-v1", model_component_id="numpy-policy")
    env = gym.make("CartPole-v1")
    result = rlmesh.run(Model(_policy), bridge.wrap(env) if wrapped else env, seeds=seeds,
                        hooks=bridge)
    hooks.flush(15)
    return bridge, result


def _load_minari(out: Path, dataset_id: str):
    import minari

    os.environ["MINARI_DATASETS_PATH"] = str(out)
    return minari.load_dataset(dataset_id)


def test_a_minari_export_replays_from_each_seed_bit_for_bit(make_hooks, export, tmp_path):
    _, result = _run_cartpole(make_hooks)

    sink = export(tmp_path / "ds", "minari", "rlmesh/cartpole-v0")
    dataset = _load_minari(tmp_path / "ds", "rlmesh/cartpole-v0")

    episodes = sorted(dataset.iterate_episodes(), key=lambda e: e.id)
    metas = list(dataset.storage.get_episode_metadata(range(dataset.total_episodes)))
    assert [m["seed"] for m in metas] == SEEDS
    assert [len(e.rewards) for e in episodes] == [x.steps for x in result.episodes]
    for episode, meta in zip(episodes, metas, strict=True):
        env = gym.make("CartPole-v1")
        obs, _ = env.reset(seed=meta["seed"])
        replayed = [obs]
        rewards, terms, truncs = [], [], []
        for action in episode.actions:
            obs, reward, terminated, truncated, _ = env.step(int(action))
            replayed.append(obs)
            rewards.append(reward)
            terms.append(terminated)
            truncs.append(truncated)
        assert episode.observations.shape == (len(episode.actions) + 1, 4)
        assert np.stack(replayed).tobytes() == episode.observations.tobytes()
        assert list(episode.rewards) == rewards
        assert list(episode.terminations) == terms
        assert list(episode.truncations) == truncs
    cert = sink.store.committed.certificate
    assert (cert["gaps"], cert["duplicates"], cert["episodes_exported"]) == (0, 0, 3)
    assert dataset.recover_environment().spec.id == "CartPole-v1"


def test_the_minari_episode_metadata_names_session_env_model_and_record(
    make_hooks, export, tmp_path,
):
    bridge, _ = _run_cartpole(make_hooks, [21])

    export(tmp_path / "ds", "minari", "rlmesh/meta-v0")
    dataset = _load_minari(tmp_path / "ds", "rlmesh/meta-v0")

    (meta,) = dataset.storage.get_episode_metadata([0])
    assert (meta["session_id"], meta["env_id"], meta["model_component_id"],
            meta["episode_record_id"], meta["seed"]) == (
        bridge.session_id, "CartPole-v1", "numpy-policy", "ep-000001", 21)


def test_parquet_step_rows_equal_the_runs_steps_in_pyarrow_and_duckdb(
    make_hooks, export, tmp_path,
):
    _, result = _run_cartpole(make_hooks)

    export(tmp_path / "pq", "parquet")
    steps = pads.dataset(tmp_path / "pq" / "steps", partitioning="hive").to_table()
    con = duckdb.connect()
    per_episode = con.execute(
        "SELECT episode_record_id, count(*), sum(reward), bool_or(terminated) "
        f"FROM read_parquet('{tmp_path}/pq/steps/*/*.parquet', hive_partitioning=true) "
        "GROUP BY 1 ORDER BY 1").fetchall()

    assert steps.num_rows == result.total_steps
    assert per_episode == [(f"ep-{x.index + 1:06d}", x.steps, x.reward, x.terminated)
                           for x in result.episodes]
    first = steps.filter(pads.field("step") == 0).sort_by("episode_record_id")
    reset, _ = gym.make("CartPole-v1").reset(seed=SEEDS[0])
    assert np.asarray(first.column("observation")[0].as_py(), np.float32).tobytes() == (
        reset.tobytes())


def test_a_rerun_over_the_same_history_adds_nothing(make_hooks, export, tmp_path):
    _run_cartpole(make_hooks, [31, 32])
    export(tmp_path / "ds", "minari", "rlmesh/again-v0")

    sink = export(tmp_path / "ds", "minari", "rlmesh/again-v0")

    assert _load_minari(tmp_path / "ds", "rlmesh/again-v0").total_episodes == 2
    assert sink.released == []


def test_episodes_run_without_the_wrapper_are_marked_not_padded(make_hooks, export, tmp_path):
    _run_cartpole(make_hooks, [41], wrapped=False)

    sink = export(tmp_path / "pq", "parquet")
    episodes = pads.dataset(tmp_path / "pq" / "episodes", partitioning="hive").to_table()
    minari_sink = export(tmp_path / "ds", "minari", "rlmesh/nowrap-v0")

    assert episodes.column("terminal_observation").to_pylist() == [False]
    assert sink.store.committed.certificate["episodes_without_terminal_observation"] == 1
    assert minari_sink.store.committed.certificate["episodes_skipped"] == {
        "no_terminal_observation": 1}


def test_a_three_lane_vector_env_exports_each_lane_episode_whole(make_hooks, export, tmp_path):
    hooks = make_hooks()
    bridge = rlmesh_bridge(hooks, env_id="CartPole-v1", model_component_id="numpy-policy")
    seen: dict[int, list[np.ndarray]] = {}
    outcomes: dict[int, list[tuple[float, bool, bool]]] = {lane: [] for lane in range(3)}

    class Recorder(gym.vector.VectorWrapper):
        """Records every lane's observations as the env returned them."""

        def reset(self, **kwargs):
            obs, info = self.env.reset(**kwargs)
            for lane in range(3):
                seen.setdefault(lane, []).append(obs[lane].copy())
            return obs, info

        def step(self, actions):
            out = self.env.step(actions)
            for lane in range(3):
                seen[lane].append(out[0][lane].copy())
                outcomes[lane].append((float(out[1][lane]), bool(out[2][lane]),
                                       bool(out[3][lane])))
            return out

    venv = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 3)
    result = rlmesh.run(Model(lambda o: (np.asarray(o)[:, 2] > 0).astype(np.int64)),
                        bridge.wrap(Recorder(venv)), episodes=5, hooks=bridge)
    hooks.flush(15)

    export(tmp_path / "ds", "minari", "rlmesh/vector-v0")
    dataset = _load_minari(tmp_path / "ds", "rlmesh/vector-v0")

    episodes = list(dataset.iterate_episodes())
    metas = list(dataset.storage.get_episode_metadata(range(dataset.total_episodes)))
    assert sorted(len(e.rewards) for e in episodes) == sorted(x.steps for x in result.episodes)
    for episode, meta in zip(episodes, metas, strict=True):
        lane = meta["env_index"]
        stream = np.stack(seen[lane])
        # the lane's recorded observations hold the episode's T+1 as one contiguous run,
        # and the steps between them its rewards, terminations and truncations
        t1 = len(episode.rewards) + 1
        starts = [i for i in range(len(stream) - t1 + 1)
                  if stream[i:i + t1].tobytes() == episode.observations.tobytes()]
        assert len(starts) == 1
        assert outcomes[lane][starts[0]:starts[0] + t1 - 1] == list(zip(
            episode.rewards.tolist(), episode.terminations.tolist(),
            episode.truncations.tolist(), strict=True))


def test_what_a_killed_minari_commit_left_behind_is_undone_on_restart(
    make_hooks, export, tmp_path,
):
    _run_cartpole(make_hooks, [51, 52])
    export(tmp_path / "ds", "minari", "rlmesh/undo-v0")
    data = tmp_path / "ds" / "rlmesh" / "undo-v0" / "data"
    (data / "2").mkdir()  # an episode written by a commit that never completed
    (data / "2" / "junk.arrow").write_bytes(b"half")
    (data / "metadata.json").write_text('{"total_episodes": 3, "tota')  # cut mid-write

    export(tmp_path / "ds", "minari", "rlmesh/undo-v0")
    dataset = _load_minari(tmp_path / "ds", "rlmesh/undo-v0")

    assert not (data / "2").exists()
    assert dataset.total_episodes == 2
    assert [len(e.rewards) for e in dataset.iterate_episodes()] == [
        m["steps"] for m in dataset.storage.get_episode_metadata(range(2))]


def test_the_cli_exports_a_minari_dataset_and_says_how_to_load_it(
    make_hooks, stream_config, tmp_path,
):
    from click.testing import CliRunner

    from rlmesh_stream.infra.cli import main

    _, result = _run_cartpole(make_hooks, [61])
    out = tmp_path / "ds"

    run = CliRunner().invoke(main, [
        "export", "trajectories", "--bootstrap", stream_config.bootstrap,
        "--registry-url", stream_config.registry_url, "--topic-prefix",
        stream_config.topic_prefix, "--out", str(out), "--format", "minari",
        "--dataset-id", "rlmesh/cli-v0", "--from-beginning", "--until-end", "--quiet"])

    assert run.exit_code == 0, run.output
    assert f"MINARI_DATASETS_PATH={out}" in run.output
    assert '"episodes_exported": 1' in run.output
    assert _load_minari(out, "rlmesh/cli-v0").total_steps == result.total_steps


def test_a_run_after_new_rollouts_appends_only_the_new_episodes(make_hooks, export, tmp_path):
    _run_cartpole(make_hooks, [71])
    export(tmp_path / "ds", "minari", "rlmesh/append-v0")
    first = _load_minari(tmp_path / "ds", "rlmesh/append-v0")
    before = next(first.iterate_episodes()).observations.tobytes()
    _run_cartpole(make_hooks, [72, 73])

    sink = export(tmp_path / "ds", "minari", "rlmesh/append-v0")
    dataset = _load_minari(tmp_path / "ds", "rlmesh/append-v0")

    assert [e.started["seed"] for e in sink.released] == [72, 73]
    assert [m["seed"] for m in dataset.storage.get_episode_metadata(range(3))] == [71, 72, 73]
    assert next(dataset.iterate_episodes()).observations.tobytes() == before


def test_a_live_export_writes_each_run_as_its_session_ends(
    make_hooks, stream_config, tmp_path,
):
    import threading

    from rlmesh_stream.consumers.datasets.episodes import Filters
    from rlmesh_stream.consumers.datasets.export import ExportOptions, make_export
    from rlmesh_stream.consumers.runtime import RuntimeOptions

    out = tmp_path / "live"
    sink, runtime = make_export(
        stream_config, ExportOptions(out, "parquet", "rlmesh/live-v0", Filters()),
        RuntimeOptions(group_id=f"live-{tmp_path.name}", from_beginning=True,
                       checkpoint_interval=0.2))
    thread = threading.Thread(target=runtime.run)
    thread.start()
    try:
        _run_cartpole(make_hooks, [81])
        deadline = time.monotonic() + 60
        while len(sink.released) < 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        _run_cartpole(make_hooks, [82, 83])
        while len(sink.released) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        runtime.stop()
        thread.join(30)
        sink.close()

    episodes = pads.dataset(out / "episodes", partitioning="hive").to_table()
    assert sorted(episodes.column("seed").to_pylist()) == [81, 82, 83]
    assert len({p.name for p in (out / "episodes").rglob("*.parquet")}) >= 2  # two commits


def test_an_undecodable_record_is_dead_lettered_and_counted_in_the_certificate(
    make_hooks, export, stream_config, tmp_path,
):
    from confluent_kafka import Producer

    from rlmesh_stream.schemas.contract import headers as h
    from rlmesh_stream.schemas.contract.topics import EventType

    _run_cartpole(make_hooks, [91])
    producer = Producer(stream_config.kafka_config())
    producer.produce(EventType.STEP_COMPLETED.topic(stream_config.topic_prefix), b"garbage",
                     key=b"s-bad", headers=[(h.PRODUCER_ID, b"bad-producer"),
                                            (h.SEQUENCE, b"0")])
    producer.flush(10)

    sink = export(tmp_path / "ds", "minari", "rlmesh/dlq-v0")

    cert = sink.store.committed.certificate
    assert (cert["dead_letters"], cert["producers"]["bad-producer"]["dead_letters"]) == (1, 1)
    assert cert["episodes_exported"] == 1

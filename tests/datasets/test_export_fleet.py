"""The simulator's fleet (3-lane vector sessions, NEXT_STEP rolls, driver resets, lane-driven
one-lane sessions, failed sessions) exported and checked against the simulator's manifest."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.dataset as pads
import pytest

from rlmesh_stream.infra.topics import ensure_topics
from rlmesh_stream.producer.hooks import KafkaRuntimeHooks
from rlmesh_stream.producer.manifest import EpisodeManifest, Manifest
from rlmesh_stream.producer.simulator import WaitingForRoom, simulate_fleet
from rlmesh_stream.schemas.connection.config import StreamConfig
from rlmesh_stream.schemas.contract import events as ev
from tests.publishing import close_delivered

pytestmark = pytest.mark.stack
LANES = 3


@dataclass
class Fleet:
    config: StreamConfig
    manifest: Manifest
    resets: dict[tuple[str, str], np.ndarray]  # (session, record) -> its reset observation


class _Recording:
    """Publishes through `hooks`, noting each episode's reset observation as emitted: a
    reset observation's lanes, or a NEXT_STEP roll's (the observation after a step that
    rolled a lane is that lane's next episode's)."""

    def __init__(self, hooks: KafkaRuntimeHooks) -> None:
        self.hooks = hooks
        self.resets: dict[tuple[str, str], np.ndarray] = {}
        self._rolled: dict[str, list[int]] = {}  # session -> lanes its last step rolled
        self._rolls: dict[tuple[str, int], np.ndarray] = {}  # (session, lane) -> roll's

    def __getattr__(self, name: str) -> Any:
        target = getattr(self.hooks, name)

        def call(event: Any) -> None:
            self._note(event)
            target(event)

        return call

    def _note(self, event: Any) -> None:
        sid = getattr(event, "session_id", "")
        if isinstance(event, ev.StepCompletedEvent):
            self._rolled[sid] = [lane for lane, r in enumerate(event.autoreset_roll) if r]
        elif isinstance(event, ev.ObservationEmittedEvent):
            slab = np.frombuffer(event.observation[0], "<f4").reshape(event.num_envs, 4)
            if event.is_reset:
                for lane, record in enumerate(event.episode_record_ids):
                    if record:
                        self.resets[(sid, record)] = slab[lane]
            for lane in self._rolled.pop(sid, []) if not event.is_reset else []:
                self._rolls[(sid, lane)] = slab[lane]
        elif isinstance(event, ev.EpisodeStartedEvent):
            roll = self._rolls.pop((sid, event.env_index), None)
            if roll is not None:
                self.resets[(sid, event.episode_record_id)] = roll


@pytest.fixture(scope="module")
def fleet(stack: Any) -> Iterator[Fleet]:
    config = StreamConfig.from_env(env={}, bootstrap=stack.bootstrap,
                                   registry_url=stack.registry_url,
                                   topic_prefix=f"t{uuid.uuid4().hex[:10]}.rlmesh.runtime")
    ensure_topics(config, partitions=3)
    hooks = KafkaRuntimeHooks(config=config, install_exit_handlers=False)
    recording = _Recording(hooks)
    manifest = simulate_fleet(recording, sessions=10, lanes=LANES, episodes=5, seed=5,
                              failure_rate=0.3, window_every=5, lane_driven=3)
    close_delivered(hooks)
    yield Fleet(config, manifest, recording.resets)


def _exportable(fleet: Fleet, *, abandoned: bool) -> dict[tuple[str, str], EpisodeManifest]:
    """Every episode with a step, of every session kind: each starts from its reset
    observation (a NEXT_STEP roll, or the one its driver publishes when it resets a lane);
    a failed session's open episodes only as abandoned ones."""
    return {(e.session_id, e.episode_record_id): e for e in fleet.manifest.episodes
            if (e.status != "aborted" or abandoned) and e.steps > 0}


def _export(fleet: Fleet, out: Path, fmt: str, **filters: Any):
    from rlmesh_stream.consumers.datasets.episodes import Filters
    from rlmesh_stream.consumers.datasets.export import ExportOptions, run_export
    from rlmesh_stream.consumers.runtime import RuntimeOptions

    sink, _ = run_export(fleet.config, ExportOptions(out, fmt, "rlmesh/fleet-v0",
                                                     Filters(**filters)),
                         RuntimeOptions(group_id=f"g-{uuid.uuid4().hex[:8]}",
                                        from_beginning=True, until_end=True))
    return sink


def _rows(out: Path, table: str, order: list[str]) -> list[dict[str, Any]]:
    rows = pads.dataset(out / table, partitioning="hive").to_table().to_pylist()
    return sorted(rows, key=lambda r: tuple(r[c] for c in order))


def test_parquet_episodes_equal_the_manifests_steps_rewards_and_outcomes(fleet, tmp_path):
    sink = _export(fleet, tmp_path / "pq", "parquet", include_abandoned=True)

    episodes = pads.dataset(tmp_path / "pq" / "episodes", partitioning="hive").to_table()
    got = {(r["session_id"], r["episode_record_id"]): (r["steps"], r["total_reward"],
                                                       r["abandoned"])
           for r in episodes.to_pylist()}
    expected = {k: (e.steps, e.reward, e.status == "aborted")
                for k, e in _exportable(fleet, abandoned=True).items()}
    assert any(abandoned for _, _, abandoned in expected.values())
    assert got == expected
    cert = sink.store.committed.certificate
    assert (cert["gaps"], cert["duplicates"], cert["dead_letters"]) == (0, 0, 0)
    assert cert["episodes_exported"] + sum(cert["episodes_skipped"].values()) == len(
        fleet.manifest.episodes)


def test_parquet_step_rows_hold_each_lanes_steps_in_order(fleet, tmp_path):
    _export(fleet, tmp_path / "pq", "parquet")

    steps = pads.dataset(tmp_path / "pq" / "steps", partitioning="hive").to_table()
    rows = sorted(steps.select(["session_id", "episode_record_id", "step", "terminated",
                                "truncated"]).to_pylist(),
                  key=lambda r: (r["session_id"], r["episode_record_id"], r["step"]))
    expected = _exportable(fleet, abandoned=False)
    assert len(rows) == sum(e.steps for e in expected.values())
    for r in rows:
        e = expected[(r["session_id"], r["episode_record_id"])]
        last = r["step"] == e.steps - 1
        assert (r["terminated"], r["truncated"]) == (
            last and e.status == "terminated", last and e.status == "truncated")


def test_minari_episodes_start_from_their_lanes_reset_observation(fleet, tmp_path):
    import minari

    _export(fleet, tmp_path / "ds", "minari")
    os.environ["MINARI_DATASETS_PATH"] = str(tmp_path / "ds")
    dataset = minari.load_dataset("rlmesh/fleet-v0")

    metas = list(dataset.storage.get_episode_metadata(range(dataset.total_episodes)))
    expected = _exportable(fleet, abandoned=False)
    assert {(m["session_id"], m["episode_record_id"]) for m in metas} == set(expected)
    for episode, meta in zip(dataset.iterate_episodes(), metas, strict=True):
        e = expected[(meta["session_id"], meta["episode_record_id"])]
        assert episode.observations.shape == (e.steps + 1, 4)
        assert float(np.sum(episode.rewards)) == e.reward
        reset = fleet.resets[(e.session_id, e.episode_record_id)]
        assert episode.observations[0].tobytes() == reset.tobytes()


def test_every_session_kind_exports_every_episode_skipping_only_failed_sessions_open_ones(
    fleet, tmp_path,
):
    kinds = {(s.lane is not None, s.autoreset) for s in fleet.manifest.sessions}
    aborted = sum(e.status == "aborted" for e in fleet.manifest.episodes)

    sink = _export(fleet, tmp_path / "pq", "parquet")

    cert = sink.store.committed.certificate
    assert kinds == {(False, "next_step"), (False, "driver"), (True, "driver")}
    assert aborted
    assert cert["episodes_skipped"] == {"abandoned": aborted}
    assert cert["episodes_exported"] == len(_exportable(fleet, abandoned=False))


def test_long_vector_sessions_exported_live_under_the_memory_bound_equal_an_unbounded_export(
    stack, tmp_path,
):
    """Sessions of 300 episodes of up to 10 steps on 3 lanes, published at 2 000 events a
    second to an export running live with a bound of 30 lane steps: each session releases
    its episodes whole long before its end and drops the group steps read, and the dataset
    equals an unbounded export's, row for row."""
    import threading
    import time

    from rlmesh_stream.consumers.datasets.episodes import Filters
    from rlmesh_stream.consumers.datasets.export import ExportOptions, make_export
    from rlmesh_stream.consumers.runtime import RuntimeOptions

    config = StreamConfig.from_env(env={}, bootstrap=stack.bootstrap,
                                   registry_url=stack.registry_url,
                                   topic_prefix=f"t{uuid.uuid4().hex[:10]}.rlmesh.runtime")
    ensure_topics(config, partitions=2)
    options = ExportOptions(tmp_path / "bounded", "parquet", "rlmesh/fleet-v0", Filters())
    options.max_held_steps = 30
    bounded, runtime = make_export(config, options, RuntimeOptions(
        group_id=f"g-{uuid.uuid4().hex[:8]}", from_beginning=True, checkpoint_interval=0.1))
    thread = threading.Thread(target=runtime.run)
    thread.start()
    try:
        hooks = KafkaRuntimeHooks(config=config, install_exit_handlers=False)
        manifest = simulate_fleet(WaitingForRoom(hooks), sessions=2, lanes=LANES,
                                  episodes=300, seed=6, failure_rate=0.0,
                                  max_episode_steps=10, rate=2000)
        close_delivered(hooks)
        deadline = time.monotonic() + 120
        while len(bounded.released) < len(manifest.episodes) and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        runtime.stop()
        thread.join(30)
        bounded.close()
    _export(Fleet(config, manifest, {}), tmp_path / "whole", "parquet")

    sessions = bounded.joiner.sessions.values()
    assert sum(s.early_done for s in sessions) > len(manifest.episodes) // 2
    assert sum(s.dropped_real for s in sessions) > sum(e.steps for e in manifest.episodes) // 2
    key = ["session_id", "episode_record_id"]
    episodes = _rows(tmp_path / "bounded", "episodes", key)
    assert len(episodes) == len(manifest.episodes) == 600
    for got, expected in zip(episodes, _rows(tmp_path / "whole", "episodes", key),
                             strict=True):
        assert {k: v for k, v in got.items() if k != "exported_at"} == {
            k: v for k, v in expected.items() if k != "exported_at"}
    assert _rows(tmp_path / "bounded", "steps", [*key, "step"]) == _rows(
        tmp_path / "whole", "steps", [*key, "step"])
    assert bounded.store.committed.certificate["episodes_skipped"] == {}


def test_exclude_caution_skips_only_the_cautioned_sessions_episodes_besides_failed_ones(
    fleet, tmp_path,
):
    cautious = {s.session_id for s in fleet.manifest.sessions
                if any(a.severity == "caution" for a in s.advisories)}
    done = [e for e in fleet.manifest.episodes if e.status != "aborted"]

    sink = _export(fleet, tmp_path / "pq", "parquet", exclude_caution=True)

    cert = sink.store.committed.certificate
    aborted = sum(e.status == "aborted" for e in fleet.manifest.episodes)
    assert cert["episodes_skipped"] == {
        "abandoned": aborted, "caution": sum(e.session_id in cautious for e in done)}


def test_exclude_caution_leaves_out_the_sessions_with_a_caution_advisory(fleet, tmp_path):
    cautious = {s.session_id for s in fleet.manifest.sessions
                if any(a.severity == "caution" for a in s.advisories)}

    _export(fleet, tmp_path / "pq", "parquet", exclude_caution=True)
    episodes = pads.dataset(tmp_path / "pq" / "episodes", partitioning="hive").to_table()

    assert cautious
    assert not cautious & set(episodes.column("session_id").to_pylist())
    assert set(episodes.column("session_id").to_pylist())


def test_lane_driven_one_lane_sessions_export_every_episode(stack, tmp_path):
    config = StreamConfig.from_env(env={}, bootstrap=stack.bootstrap,
                                   registry_url=stack.registry_url,
                                   topic_prefix=f"t{uuid.uuid4().hex[:10]}.rlmesh.runtime")
    ensure_topics(config, partitions=1)
    hooks = KafkaRuntimeHooks(config=config, install_exit_handlers=False)
    manifest = simulate_fleet(hooks, sessions=0, lane_driven=2, episodes=3, seed=2,
                              failure_rate=0.0)
    close_delivered(hooks)

    sink = _export(Fleet(config, manifest, {}), tmp_path / "pq", "parquet")

    cert = sink.store.committed.certificate
    assert cert["episodes_skipped"] == {}
    assert cert["episodes_exported"] == len(manifest.episodes) == 6


def test_one_lane_next_step_sessions_export_every_episode_from_its_roll_observation(
    stack, tmp_path, monkeypatch,
):
    """A one-lane env under NEXT_STEP autoreset: each episode after the first begins from
    the previous one's roll, whose observation is attributed to the ended episode."""
    import minari

    config = StreamConfig.from_env(env={}, bootstrap=stack.bootstrap,
                                   registry_url=stack.registry_url,
                                   topic_prefix=f"t{uuid.uuid4().hex[:10]}.rlmesh.runtime")
    ensure_topics(config, partitions=2)
    recording = _Recording(KafkaRuntimeHooks(config=config, install_exit_handlers=False))
    manifest = simulate_fleet(recording, sessions=3, lanes=1, episodes=4, seed=4,
                              failure_rate=0.0, next_step_fraction=1.0)
    close_delivered(recording.hooks)
    assert {s.autoreset for s in manifest.sessions} == {"next_step"}

    sink = _export(Fleet(config, manifest, recording.resets), tmp_path / "ds", "minari")

    cert = sink.store.committed.certificate
    assert cert["episodes_skipped"] == {}
    assert cert["episodes_exported"] == len(manifest.episodes) == 12
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "ds"))
    dataset = minari.load_dataset("rlmesh/fleet-v0")
    metas = dataset.storage.get_episode_metadata(range(dataset.total_episodes))
    for episode, meta in zip(dataset.iterate_episodes(), metas, strict=True):
        reset = recording.resets[(meta["session_id"], meta["episode_record_id"])]
        assert episode.observations[0].tobytes() == reset.tobytes()

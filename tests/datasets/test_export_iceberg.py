"""`export trajectories --format iceberg`: the Parquet layout's rows in two Iceberg tables,
read back with pyiceberg's scan; exactly once across kills, reruns and a zombie."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.dataset as pads
import pytest

from rlmesh_stream.consumers.datasets.episodes import Filters
from rlmesh_stream.consumers.datasets.export import ExportOptions, run_export
from rlmesh_stream.consumers.runtime import RuntimeOptions
from rlmesh_stream.schemas.connection.config import StreamConfig
from tests.datasets.fleet_export import clean_export, iceberg_cli, publish_fleet

pytest.importorskip("pyiceberg")
pytestmark = [pytest.mark.stack, pytest.mark.slow]
TABLE = "rl.fleet"


@pytest.fixture(scope="module")
def fleet(stack: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[
        tuple[StreamConfig, Path]]:
    """A fleet on 4 partitions and its clean Parquet export (the reference rows)."""
    config = publish_fleet(stack, partitions=4, sessions=40, episodes=12, seed=12)
    yield config, clean_export(config, tmp_path_factory.mktemp("clean") / "ds")


def _cli(config: StreamConfig, catalog: Path, group: str, *extra: str) -> list[str]:
    return iceberg_cli(config, catalog, TABLE, group, *extra)


def _scan(catalog: Path, kind: str) -> list[dict[str, Any]]:
    from pyiceberg.catalog.sql import SqlCatalog

    cat = SqlCatalog("rlmesh", uri=f"sqlite:///{catalog}", init_catalog_tables="false",
                     warehouse=(catalog.parent / "warehouse").as_uri())
    table = cat.load_table(f"{TABLE}_{kind}").scan().to_arrow()  # env_id on steps, as Parquet
    keys = ["session_id", "episode_record_id"] + (["step"] if kind == "steps" else [])
    return table.sort_by([(k, "ascending") for k in keys]).to_pylist()


def _parquet(out: Path, kind: str) -> list[dict[str, Any]]:
    table = pads.dataset(out / kind, partitioning="hive").to_table()
    table = table.drop_columns(["env"])
    keys = ["session_id", "episode_record_id"] + (["step"] if kind == "steps" else [])
    return table.sort_by([(k, "ascending") for k in keys]).to_pylist()


def _same_rows(catalog: Path, clean: Path) -> None:
    for kind in ("episodes", "steps"):
        got, want = _scan(catalog, kind), _parquet(clean, kind)
        keys = [(r["session_id"], r["episode_record_id"], r.get("step")) for r in got]
        assert len(keys) == len(set(keys)), f"duplicate {kind} rows"
        missing = {(r["session_id"], r["episode_record_id"]) for r in want} - {
            (r["session_id"], r["episode_record_id"]) for r in got}
        assert got == want, (f"{kind}: {len(got)} rows, the clean run has {len(want)}; "
                             f"missing {sorted(missing)[:5]}")


def _generation(catalog: Path) -> int:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.exceptions import NoSuchTableError

    if not catalog.exists():
        return 0
    cat = SqlCatalog("rlmesh", uri=f"sqlite:///{catalog}", init_catalog_tables="false",
                     warehouse=(catalog.parent / "warehouse").as_uri())
    try:
        head = cat.load_table(f"{TABLE}_episodes").current_snapshot()
    except NoSuchTableError:
        return 0
    return int(head.summary.additional_properties.get("rlmesh.generation", 0)) if head else 0


def test_the_tables_hold_the_parquet_layouts_rows(fleet: tuple[StreamConfig, Path],
                                                  tmp_path: Path) -> None:
    config, clean = fleet
    catalog = tmp_path / "catalog.db"
    run = subprocess.run(_cli(config, catalog, f"g-{uuid.uuid4().hex[:8]}"),
                         capture_output=True, text=True, timeout=600)

    assert run.returncode == 0, run.stderr[-2000:]
    _same_rows(catalog, clean)


def test_a_rerun_adds_no_row(fleet: tuple[StreamConfig, Path], tmp_path: Path) -> None:
    config, clean = fleet
    catalog = tmp_path / "catalog.db"
    group = f"g-{uuid.uuid4().hex[:8]}"
    for _ in range(2):
        run = subprocess.run(_cli(config, catalog, group), capture_output=True, text=True,
                             timeout=600)
        assert run.returncode == 0, run.stderr[-2000:]

    _same_rows(catalog, clean)


def test_sigkills_at_random_moments_then_a_restart_give_the_clean_rows(
        fleet: tuple[StreamConfig, Path], tmp_path: Path) -> None:
    config, clean = fleet
    catalog = tmp_path / "catalog.db"
    group = f"g-{uuid.uuid4().hex[:8]}"
    rng = random.Random(25)
    for _ in range(5):
        before = _generation(catalog)
        proc = subprocess.Popen(_cli(config, catalog, group, "--max-batch", "3000"),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 90
        while _generation(catalog) == before and proc.poll() is None and (
                time.monotonic() < deadline):
            time.sleep(0.05)
        time.sleep(rng.uniform(0.0, 1.0))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    final = subprocess.run(_cli(config, catalog, group), capture_output=True, text=True,
                           timeout=600)

    assert final.returncode == 0, final.stderr[-2000:]
    _same_rows(catalog, clean)


def test_a_zombie_past_its_session_timeout_commits_nothing(
        fleet: tuple[StreamConfig, Path], tmp_path: Path) -> None:
    """SIGSTOP a member past its session timeout, let another take its partitions and
    commit, SIGCONT it: it is fenced (and refused as a second member); the table ends
    as a clean run's."""
    config, clean = fleet
    catalog = tmp_path / "catalog.db"
    group = f"g-{uuid.uuid4().hex[:8]}"
    # rare commits: the pause lands while it reads, not inside a catalog transaction
    # (a member paused holding SQLite's lock stalls every writer until it resumes)
    zombie = subprocess.Popen(_cli(config, catalog, group, "--max-batch", "1000000",
                                   "--checkpoint-interval", "4"),
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 90
    while _generation(catalog) == 0 and zombie.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)
    os.kill(zombie.pid, signal.SIGSTOP)
    successor = subprocess.Popen(_cli(config, catalog, group), stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE, text=True)
    time.sleep(20)  # past the zombie's session timeout (10 s): its partitions move
    os.kill(zombie.pid, signal.SIGCONT)
    zombie.communicate(timeout=600)
    _, successor_err = successor.communicate(timeout=600)

    assert successor.returncode == 0, successor_err[-2000:]
    _same_rows(catalog, clean)


def _store(catalog: Path, group: str = "g") -> Any:
    from rlmesh_stream.consumers.datasets.iceberg import IcebergStore, IcebergTarget

    return IcebergStore(IcebergTarget(f"sqlite:///{catalog}", TABLE), group)


def _spaces(action: Any = None) -> tuple[bytes, bytes]:
    """SpaceSpec bytes of a Box observation and `action` (Discrete(2) by default)."""
    import gymnasium as gym

    from rlmesh_stream.producer.leaves import space_spec

    return (space_spec(gym.spaces.Box(-1, 1, (2,))).SerializeToString(),
            space_spec(action or gym.spaces.Discrete(2)).SerializeToString())


def _batch(store: Any, shard: int, offset: int, env: str = "e",
           spaces: tuple[bytes, bytes] | None = None) -> None:
    import pyarrow as pa

    from rlmesh_stream.consumers.datasets.iceberg import StepRows

    steps = pa.table({"session_id": ["s"], "step": pa.array([offset], pa.int64()),
                      "env_id": [env]})
    store.stage([StepRows(env, spaces or _spaces(), steps)], None)
    store.commit(offsets={"certificate": {("t", shard): offset}}, shards={shard: {"n": 1}})


def test_a_process_whose_partitions_were_claimed_since_it_read_them_commits_nothing(
        tmp_path: Path) -> None:
    from rlmesh_stream.consumers.sinks.base import OffsetConflict

    catalog = tmp_path / "catalog.db"
    _batch(_store(catalog), 0, 10)
    zombie = _store(catalog)  # reads generation 1
    successor = _store(catalog)
    successor.commit(offsets={}, shards={0: {"n": 1}})  # the claim: partition 0 moved

    with pytest.raises(OffsetConflict):
        _batch(zombie, 0, 20)

    fresh = _store(catalog)
    assert fresh.generation == 2
    assert fresh.offsets("certificate") == {("t", 0): 10}
    assert fresh.steps.scan().to_arrow().num_rows == 1


def test_members_committing_other_partitions_never_fence_each_other(tmp_path: Path) -> None:
    catalog = tmp_path / "catalog.db"
    first, second = _store(catalog), _store(catalog)  # both read the empty table

    _batch(first, 0, 10)
    _batch(second, 1, 7)  # on a head that moved: made again on the new one
    _batch(first, 0, 12)

    fresh = _store(catalog)
    assert fresh.offsets("certificate") == {("t", 0): 12, ("t", 1): 7}
    assert sorted(fresh.steps.scan().to_arrow().column("step").to_pylist()) == [7, 10, 12]


def test_another_group_is_refused_a_table_in_one_line(tmp_path: Path) -> None:
    from rlmesh_stream.consumers.datasets.manifest import DatasetError

    catalog = tmp_path / "catalog.db"
    _batch(_store(catalog, "g1"), 0, 10)

    with pytest.raises(DatasetError, match="is exported by consumer group g1"):
        _store(catalog, "g2")


def test_step_files_a_crash_left_unadded_are_rolled_forward_once(tmp_path: Path) -> None:
    """A crash between the episodes commit and the steps commit: the next open adds the
    generation's step rows, and opening again adds nothing."""
    catalog = tmp_path / "catalog.db"
    _batch(_store(catalog), 0, 10)
    store = _store(catalog)
    store._roll_forward = lambda: None  # the process dies right after the episodes commit
    _batch(store, 0, 11)
    assert _store(catalog).steps.scan().to_arrow().num_rows == 2

    assert _store(catalog).steps.scan().to_arrow().num_rows == 2


def test_members_exporting_envs_of_other_column_types_at_once_agree_on_their_tables(
        tmp_path: Path) -> None:
    """Both read the table while no env had a steps table, and each stages its env for the
    main one: the second commit, made again on the head the first left, puts its env in a
    steps table of its own."""
    import gymnasium as gym

    catalog = tmp_path / "catalog.db"
    first, second = _store(catalog), _store(catalog)

    _batch(first, 0, 10, env="Disc-v0")
    _batch(second, 1, 7, env="Cont-v0", spaces=_spaces(gym.spaces.Box(-1, 1, (1,))))

    fresh = _store(catalog)
    assert fresh.envs_by_steps_table() == {f"{TABLE}_steps": ["Disc-v0"],
                                           f"{TABLE}_steps_cont_v0": ["Cont-v0"]}
    assert fresh.steps.scan().to_arrow().column("step").to_pylist() == [10]
    other = fresh.catalog.load_table(f"{TABLE}_steps_cont_v0")
    assert other.scan().to_arrow().column("step").to_pylist() == [7]


def test_step_files_of_every_steps_table_a_crash_left_unadded_are_rolled_forward_once(
        tmp_path: Path) -> None:
    import gymnasium as gym

    catalog = tmp_path / "catalog.db"
    _batch(_store(catalog), 0, 10, env="Disc-v0")
    store = _store(catalog)
    store._roll_forward = lambda: None  # the process dies right after the episodes commit
    _batch(store, 0, 11, env="Cont-v0", spaces=_spaces(gym.spaces.Box(-1, 1, (1,))))

    for _ in range(2):  # opening adds the steps of both tables, once
        fresh = _store(catalog)
        other = fresh.catalog.load_table(f"{TABLE}_steps_cont_v0")
        assert fresh.steps.scan().to_arrow().column("step").to_pylist() == [10]
        assert other.scan().to_arrow().column("step").to_pylist() == [11]


@pytest.mark.postgres
def test_a_postgresql_catalog_holds_the_same_rows(fleet: tuple[StreamConfig, Path],
                                                  postgres_dsn: str, tmp_path: Path) -> None:
    from pyiceberg.catalog.sql import SqlCatalog

    config, clean = fleet
    dsn = postgres_dsn.replace("postgresql://", "postgresql+psycopg://", 1)
    args = _cli(config, tmp_path / "unused.db", f"g-{uuid.uuid4().hex[:8]}")
    args[args.index("--catalog") + 1] = postgres_dsn
    run = subprocess.run([*args, "--warehouse", str(tmp_path / "wh")], capture_output=True,
                         text=True, timeout=600)

    assert run.returncode == 0, run.stderr[-2000:]
    catalog = SqlCatalog("rlmesh", uri=dsn, warehouse=(tmp_path / "wh").as_uri())
    got = catalog.load_table(f"{TABLE}_episodes").scan().to_arrow().sort_by(
        [("session_id", "ascending"), ("episode_record_id", "ascending")]).to_pylist()
    assert got == _parquet(clean, "episodes")


def test_duckdb_reads_the_steps_through_pyiceberg(fleet: tuple[StreamConfig, Path],
                                                  tmp_path: Path) -> None:
    from pyiceberg.catalog.sql import SqlCatalog

    config, clean = fleet
    catalog = tmp_path / "catalog.db"
    run = subprocess.run(_cli(config, catalog, f"g-{uuid.uuid4().hex[:8]}"),
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    tables = SqlCatalog("rlmesh", uri=f"sqlite:///{catalog}",
                        warehouse=(catalog.parent / "warehouse").as_uri())

    con = tables.load_table(f"{TABLE}_steps").scan().to_duckdb(table_name="steps")
    per_env = con.execute("SELECT env_id, count(*) FROM steps GROUP BY env_id").fetchall()

    assert sum(n for _, n in per_env) == len(_parquet(clean, "steps"))


def _in_process(config: StreamConfig, catalog: str, **options: Any) -> tuple[Any, Any]:
    """An iceberg export made in this process (its sink and runtime), in a group of its
    own: `catalog` an SQLite catalog's URI, `options` the RuntimeOptions beyond those of
    an offline run from the beginning."""
    from rlmesh_stream.consumers.datasets.export import make_export
    from rlmesh_stream.consumers.datasets.iceberg import IcebergTarget

    group = f"g-{uuid.uuid4().hex[:8]}"
    target = IcebergTarget(catalog, TABLE)
    return make_export(
        config, ExportOptions(None, "iceberg", TABLE, Filters(), iceberg=target, group=group),
        RuntimeOptions(group_id=group, from_beginning=True, until_end=True, **options))


def _summary(stdout: str) -> dict[str, Any]:
    import json

    return dict(json.loads(stdout.strip().splitlines()[0]))


def test_two_members_of_one_group_together_write_a_clean_runs_rows(
        fleet: tuple[StreamConfig, Path], tmp_path: Path) -> None:
    config, clean = fleet
    catalog = tmp_path / "catalog.db"
    group = f"g-{uuid.uuid4().hex[:8]}"
    members = [subprocess.Popen(_cli(config, catalog, group, "--max-batch", "2000"),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for _ in range(2)]
    outputs = [m.communicate(timeout=600) for m in members]

    assert [m.returncode for m in members] == [0, 0], [err[-1500:] for _, err in outputs]
    _same_rows(catalog, clean)
    summary = _summary(outputs[0][0])
    assert (summary["gaps"], summary["duplicates"]) == (0, 0)


def test_a_member_whose_last_checkpoint_is_fenced_reads_again_before_it_ends(
        fleet: tuple[StreamConfig, Path], tmp_path: Path) -> None:
    """Another member claims this one's shards just before its last checkpoint (the one
    reaching every partition's end) commits: the checkpoint is dropped, and the member
    reads again from the table's offsets before it ends and decides. It used to end at
    once (everything had been read), exit 0 and leave that checkpoint's episodes out."""
    config, clean = fleet
    catalog = tmp_path / "catalog.db"
    sink, runtime = _in_process(config, f"sqlite:///{catalog}", max_batch=500)
    group = runtime.options.group_id
    commit, claimed = sink.table.commit, []

    def claimed_before_the_last_checkpoint(*, offsets: Any, shards: Any) -> None:
        read = offsets.get("certificate", {})
        ends = runtime.offsets.group_ends
        if not claimed and read and all(read.get(tp, 0) >= end for tp, end in ends.items()):
            other = _store(catalog, group)  # the claim a newly assigned member makes
            other.commit(offsets={}, shards={n: other.shard_state(n) for n in shards})
            claimed.append(sorted(shards))
        commit(offsets=offsets, shards=shards)

    sink.table.commit = claimed_before_the_last_checkpoint
    try:
        runtime.run()
        sink.finish()
    finally:
        sink.close()

    assert claimed == [[0, 1, 2, 3]]  # the fence was hit, on the last checkpoint
    _same_rows(catalog, clean)


def test_a_commit_failing_for_a_moment_is_read_again_not_applied_again(
        fleet: tuple[StreamConfig, Path], tmp_path: Path) -> None:
    """The catalog's write lock is held elsewhere (another writer, a paused one) past
    the catalog's timeout during a checkpoint: the member reads the checkpoint's records
    again from the table's offsets. Retrying the same batch committed its offsets with a
    joiner that had gone back to the table's state, without the batch's records: lost."""
    import sqlite3

    from rlmesh_stream.consumers.datasets.export import make_export
    from rlmesh_stream.consumers.datasets.iceberg import IcebergTarget

    config, clean = fleet
    catalog = tmp_path / "catalog.db"
    group = f"g-{uuid.uuid4().hex[:8]}"
    target = IcebergTarget(f"sqlite:///{catalog}?timeout=0.2", TABLE)
    sink, runtime = make_export(
        config, ExportOptions(None, "iceberg", TABLE, Filters(), iceberg=target, group=group),
        RuntimeOptions(group_id=group, from_beginning=True, until_end=True, max_batch=500))
    commit = sink.table.commit
    lock: dict[str, Any] = {}

    def locked_at_the_first_checkpoint(*, offsets: Any, shards: Any) -> None:
        if "held" in lock:  # the next commit, whatever it is: the other writer is done
            lock.pop("held").close()
        elif offsets and "met" not in lock:
            other = sqlite3.connect(catalog, isolation_level=None, check_same_thread=False)
            other.execute("BEGIN IMMEDIATE")  # its write lock: readers go on, writers wait
            lock["held"] = lock["met"] = other
        commit(offsets=offsets, shards=shards)

    sink.table.commit = locked_at_the_first_checkpoint
    try:
        runtime.run()
        sink.finish()
    finally:
        sink.close()

    assert "met" in lock and "held" not in lock  # the lock was met, and let go
    _same_rows(catalog, clean)


def test_a_member_fenced_after_the_group_dropped_it_never_claims_its_shards_back(
        fleet: tuple[StreamConfig, Path], tmp_path: Path) -> None:
    """A member stalls inside a checkpoint past its poll interval (the group drops it, as
    it drops a paused member past its session timeout) while a successor takes and claims
    its shards. Fenced once it resumes, it waits for its next assignment: it used to
    claim the shards back at once, fencing their new owner in turn, until Kafka told it."""
    from rlmesh_stream.consumers.datasets.export import make_export
    from rlmesh_stream.consumers.datasets.iceberg import IcebergTarget

    config, clean = fleet
    catalog = tmp_path / "catalog.db"
    group = f"g-{uuid.uuid4().hex[:8]}"
    target = IcebergTarget(f"sqlite:///{catalog}", TABLE)
    limits = {"max.poll.interval.ms": 6000, "session.timeout.ms": 6000}
    sink, runtime = make_export(
        config, ExportOptions(None, "iceberg", TABLE, Filters(), iceberg=target, group=group),
        RuntimeOptions(group_id=group, from_beginning=True, until_end=True, max_batch=300,
                       checkpoint_interval=0.2, kafka_overrides=limits))
    commit, on_assign = sink.table.commit, runtime._on_assign
    events: list[str] = []
    successor: list[subprocess.Popen[str]] = []

    def stalled_at_the_first_checkpoint(*, offsets: Any, shards: Any) -> None:
        if offsets and not successor:
            generation = _generation(catalog)
            successor.append(subprocess.Popen(_cli(config, catalog, group),
                                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                              text=True))
            deadline = time.monotonic() + 120
            while _generation(catalog) == generation and time.monotonic() < deadline:
                time.sleep(0.1)  # until the successor has claimed the shards
            events.append("successor claimed")
        elif not offsets and successor:
            events.append("claim")
        commit(offsets=offsets, shards=shards)

    def assigned(*args: Any) -> None:
        events.append("assigned")
        on_assign(*args)

    sink.table.commit = stalled_at_the_first_checkpoint
    runtime._on_assign = assigned  # type: ignore[method-assign]
    try:
        runtime.run()
        sink.finish()
    finally:
        sink.close()
    _, successor_err = successor[0].communicate(timeout=600)

    after = events[events.index("successor claimed") + 1:]
    assert after[:1] == ["assigned"], events  # no claim before its next assignment
    assert successor[0].returncode == 0, successor_err[-2000:]
    _same_rows(catalog, clean)


def _export_keeping_4_snapshots(fleet: tuple[StreamConfig, Path], tmp_path: Path,
                                monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Any]:
    """One clean export with KEEP_SNAPSHOTS at 4 (enough checkpoints to expire some): its
    catalog file and the catalog, opened for reading."""
    from pyiceberg.catalog.sql import SqlCatalog

    from rlmesh_stream.consumers.datasets import iceberg
    from rlmesh_stream.consumers.datasets.iceberg import IcebergTarget

    monkeypatch.setattr(iceberg, "KEEP_SNAPSHOTS", 4)
    config, _ = fleet
    catalog = tmp_path / "catalog.db"
    group = f"g-{uuid.uuid4().hex[:8]}"
    run_export(config, ExportOptions(None, "iceberg", TABLE, Filters(), group=group,
                                     iceberg=IcebergTarget(f"sqlite:///{catalog}", TABLE)),
               RuntimeOptions(group_id=group, from_beginning=True, until_end=True,
                              max_batch=300))
    return catalog, SqlCatalog("rlmesh", uri=f"sqlite:///{catalog}",
                               init_catalog_tables="false",
                               warehouse=(catalog.parent / "warehouse").as_uri())


def test_old_snapshots_are_expired_as_the_export_commits(
        fleet: tuple[StreamConfig, Path], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Every checkpoint is a snapshot of each table, and each metadata file lists them all:
    beyond the newest KEEP_SNAPSHOTS (4 here) they are expired while the export commits,
    and the tables still hold a clean run's rows."""
    catalog, tables = _export_keeping_4_snapshots(fleet, tmp_path, monkeypatch)

    episodes = tables.load_table(f"{TABLE}_episodes")
    assert _generation(catalog) > 2 * 4  # enough checkpoints to expire some
    for kind in ("episodes", "steps"):
        assert len(tables.load_table(f"{TABLE}_{kind}").metadata.snapshots) < 2 * 4
    metadata_files = list((catalog.parent / "warehouse").rglob("*.metadata.json"))
    assert len(metadata_files) <= 2 * (10 + 1)
    assert episodes.properties["write.metadata.delete-after-commit.enabled"] == "true"
    _same_rows(catalog, fleet[1])


def test_the_state_files_only_expired_snapshots_named_are_removed(
        fleet: tuple[StreamConfig, Path], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Each checkpoint writes a state file per shard held: those only expired snapshots
    named are deleted as the snapshots are expired (they used to stay, one per shard and
    checkpoint, for ever), and every one a snapshot still names is there."""
    import json

    catalog, tables = _export_keeping_4_snapshots(fleet, tmp_path, monkeypatch)

    snapshots = tables.load_table(f"{TABLE}_episodes").metadata.snapshots
    named = {path.rsplit("/", 1)[1] for s in snapshots for path in json.loads(
        s.summary.additional_properties.get("rlmesh.shards", "{}")).values()}
    on_disk = {f.name for f in (catalog.parent / "warehouse").rglob("rlmesh-state/*.json")}
    assert _generation(catalog) > 2 * 4  # enough checkpoints to expire some
    assert on_disk == named
    _same_rows(catalog, fleet[1])


def test_shards_an_eager_rebalance_gives_straight_back_are_read_on_not_again(
        fleet: tuple[StreamConfig, Path], tmp_path: Path) -> None:
    """A second member joins: the range assignment revokes every partition of the first,
    then gives it half back. Those shards go on from the offsets it had read to, their open
    episodes kept in memory (they were read again from their resume offsets: a fifth to a
    quarter of a two-member export's records read twice); the rows are a clean run's."""
    config, clean = fleet
    catalog = tmp_path / "catalog.db"
    sink, runtime = _in_process(config, f"sqlite:///{catalog}", max_batch=300)
    group = runtime.options.group_id
    commit, rewound = sink.table.commit, sink.rewound
    consume, on_revoke = runtime._consume, runtime._on_revoke
    committed, rebalancing, resumed, starts = threading.Event(), threading.Event(), [], []
    resumed_reading: list[bool] = []

    def noted_commit(*, offsets: Any, shards: Any) -> None:
        commit(offsets=offsets, shards=shards)
        if offsets:  # records read and committed (a claim has no offsets)
            committed.set()

    def paused_consume() -> Any:
        """Once something is committed, reading waits for the second member (the group's
        callbacks are still served): the rebalance comes with much left to read. The
        partitions given back are resumed (librdkafka keeps a partition's pause)."""
        assert runtime.consumer is not None
        if committed.is_set() and not rebalancing.is_set():
            runtime.consumer.pause(runtime.consumer.assignment())
            return runtime.consumer.consume(runtime.options.poll_batch, 0.05)
        if rebalancing.is_set() and not resumed_reading:
            held = runtime.consumer.assignment()
            if held:
                runtime.consumer.resume(held)
                resumed_reading.append(True)
        return consume()

    def revoking(*args: Any) -> None:
        rebalancing.set()
        on_revoke(*args)

    def recorded(partitions: Any = None) -> None:
        rewound(partitions)
        if sink.resumed:
            resumed.append(sorted(sink.resumed))
            starts.append((sink.load_offsets("trajectories"),
                           sink.table.offsets("certificate")))

    sink.table.commit, sink.rewound = noted_commit, recorded
    runtime._consume, runtime._on_revoke = paused_consume, revoking  # type: ignore[method-assign]
    reading = threading.Thread(target=runtime.run)
    reading.start()
    try:
        assert committed.wait(120)
        second = subprocess.run(_cli(config, catalog, group), capture_output=True, text=True,
                                timeout=600)
        reading.join(600)
        sink.finish()
    finally:
        sink.close()

    assert second.returncode == 0, second.stderr[-1500:]
    assert runtime.reached_end
    assert len(resumed[0]) == 2  # half of the four shards came straight back
    trajectory, read = starts[0]
    back = {tp: o for tp, o in trajectory.items() if tp[1] in resumed[0]}
    assert back and all(o == read[tp] for tp, o in back.items())
    _same_rows(catalog, clean)


@pytest.mark.parametrize(("read_to", "set_aside"), [(60, []), (100, [0])])
def test_a_restored_shard_is_set_aside_only_once_read_again_past_its_frontier(
        fleet: tuple[StreamConfig, Path], tmp_path: Path, read_to: int,
        set_aside: list[int]) -> None:
    """A shard restored from the table holds its open episodes' records only once reading
    has passed what was read before the restore (its frontier): short of it, taking it back
    as it is would start at the read offsets and never read the rest of those records."""
    from rlmesh_stream.consumers.datasets.certificate import Certificate
    from rlmesh_stream.consumers.datasets.episodes import Joiner

    config, _ = fleet
    sink, _runtime = _in_process(config, f"sqlite:///{tmp_path / 'catalog.db'}")
    try:
        joiner = Joiner(Filters())
        topic = f"{config.topic_prefix}.step_completed"
        joiner.frontier = {(topic, 0): 100}
        sink.held, sink.shards[0] = {0}, (joiner, Certificate())
        sink.revoked(read={(topic, 0): read_to})
        assert sorted(sink._parked) == set_aside
    finally:
        sink.close()

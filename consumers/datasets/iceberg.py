"""`--format iceberg`: episodes and steps as two Iceberg tables, exactly once, through pyiceberg.

`--table NS.NAME` is two tables in the catalog (pyiceberg's SQL catalog, named `rlmesh`:
`sqlite:///PATH` or `postgresql://...`; Java's JDBC catalog reads the same):
`NS.NAME_episodes` and `NS.NAME_steps`, the Parquet layout's columns (writers.py) plus
`env_id` in the steps, both partitioned by `env_id`.

One chain of commits, on the episodes table, is the source of truth. Each export commit
is one episodes snapshot holding the batch's episode rows and, in its summary,
`rlmesh.generation`, `rlmesh.offsets` (per builder and partition, the next offset: the
whole group's), `rlmesh.shards` (per partition number, a JSON state file beside the
data: that shard's joiner state and certificate), `rlmesh.group` and
`rlmesh.steps-files` (the batch's step rows, written as Parquet files before the
commit). The steps table follows: the files of the head's generation are added (rolled
forward) after the commit, before any later commit and whenever the table is opened, so
a crash between any two steps leaves either files no snapshot lists or a committed
generation whose step rows are added once.

Others may commit to the tables too (a compaction, a row delete, an empty append, a schema
or partition change): the state is read from the newest snapshot of the table's history
that carries it (`rlmesh.generation`), not from the head. What others committed on top is
reconciled when it leaves the rows as that snapshot left them (the live rows: records
less position deletes; no new equality delete): a compaction, an empty append, a schema
or partition change. Anything else (rows of the export's deleted, or rows added by
another writer) is refused in one line naming both snapshots and both counts: the
export could no longer say which episodes the table holds, and writing on would either
write episodes twice or certify rows that are not there. Expiring snapshots keeps the
one that carries the state.

Fencing: every commit is pyiceberg's optimistic commit (`AssertRefSnapshotId`, retries
off). On a head that moved, the commit is made again on the new head unless one of the
committing member's shards was committed by another process since it read them: then it
raises OffsetConflict (the runtime drops the checkpoint and reads again). Members claim
their shards when they are assigned (iceberg_sink.py), so one paused past its session
timeout (a zombie) whose shards moved cannot commit them.
"""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from rlmesh_stream.consumers.datasets.manifest import DatasetError
from rlmesh_stream.consumers.datasets.model import Episode
from rlmesh_stream.consumers.datasets.per_env import column_types
from rlmesh_stream.consumers.datasets.writers import (
    EPISODE_SCHEMA,
    _episode_row,
    _safe,
    _steps_table,
)
from rlmesh_stream.consumers.sinks.base import OffsetConflict

_NO_RETRIES = {"commit.retry.num-retries": "0"}  # a conflict is ours to decide: fenced
# Each checkpoint is a snapshot, and every snapshot is listed in each new metadata file:
# every KEEP_SNAPSHOTS generations the committing member expires the snapshots of both
# tables beyond the newest KEEP_SNAPSHOTS (their data files stay), and pyiceberg deletes
# metadata files beyond the newest 10 (tables made since: `_TABLE_PROPERTIES`).
KEEP_SNAPSHOTS = 64
_TABLE_PROPERTIES = {**_NO_RETRIES, "write.metadata.delete-after-commit.enabled": "true",
                     "write.metadata.previous-versions-max": "10"}
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class IcebergTarget:
    catalog: str  # sqlite:///PATH | postgresql://...
    table: str  # NAMESPACE.NAME
    warehouse: str | None = None  # a directory or any URI pyarrow knows


def check_target(target: IcebergTarget) -> None:
    if "." not in target.table or not all(target.table.split(".")):
        raise DatasetError(f"--table {target.table!r} is not NAMESPACE.NAME")
    if not target.catalog.startswith(("sqlite:///", "postgresql://", "postgresql+")):
        raise DatasetError(f"--catalog {target.catalog!r} is not sqlite:///PATH or "
                           "postgresql://...")


def warehouse_of(target: IcebergTarget) -> str:
    """--warehouse, else (sqlite) the directory `warehouse` beside the catalog's file."""
    if target.warehouse:
        return target.warehouse if "://" in target.warehouse else (
            Path(target.warehouse).resolve().as_uri())
    if target.catalog.startswith("sqlite:///"):
        return (Path(target.catalog[len("sqlite:///"):]).resolve().parent / "warehouse").as_uri()
    raise DatasetError("--warehouse is needed with a postgresql catalog (a directory or "
                       "an s3://... URI the tables' files go to)")


def _catalog(target: IcebergTarget) -> Any:
    try:
        from pyiceberg.catalog.sql import SqlCatalog
    except ModuleNotFoundError as exc:
        raise DatasetError(f"{exc.name} is missing: pip install 'rlmesh-stream[iceberg]'"
                           ) from None

    props = {"uri": target.catalog, "warehouse": warehouse_of(target)}
    if target.catalog.startswith("postgresql://"):  # psycopg 3 (the consumers extra's)
        props["uri"] = "postgresql+psycopg://" + target.catalog[len("postgresql://"):]
    if target.catalog.startswith("sqlite:///") and "timeout=" not in target.catalog:
        # another process's write (or one paused in it) holds SQLite's lock: wait for it
        # (pysqlite's 5 s default failed a commit while a paused member held it)
        props["uri"] += ("&" if "?" in target.catalog else "?") + "timeout=300"
    if target.catalog.startswith("sqlite:///"):
        Path(target.catalog[len("sqlite:///"):]).resolve().parent.mkdir(parents=True,
                                                                        exist_ok=True)
    try:
        try:
            return SqlCatalog("rlmesh", **props)
        except Exception as exc:
            if "already exists" not in str(exc):
                raise
            # another process made the catalog's own tables meanwhile (pyiceberg's check
            # and create are not one transaction): they are there now
            return SqlCatalog("rlmesh", **props)
    except Exception as exc:  # sqlalchemy's errors, a missing driver
        raise DatasetError(f"cannot open the catalog {target.catalog} "
                           f"({type(exc).__name__}: {str(exc).splitlines()[0]})") from None


class IcebergStore:
    """The committed state, read from and written to the episodes table's snapshots."""

    def __init__(self, target: IcebergTarget, group: str) -> None:
        check_target(target)
        self.target = target
        self.group = group
        self.catalog = _catalog(target)
        namespace, name = target.table.rsplit(".", 1)
        try:
            try:
                self.catalog.create_namespace_if_not_exists(namespace)
            except Exception:  # made by another member meanwhile: it exists now
                self.catalog.create_namespace_if_not_exists(namespace)
        except Exception as exc:
            raise DatasetError(f"cannot use namespace {namespace} in {target.catalog} "
                               f"({type(exc).__name__}: {str(exc).splitlines()[0]})") from None
        self.names = (f"{namespace}.{name}_steps", f"{namespace}.{name}_episodes")
        self.source = f"table {target.table} in {target.catalog}"
        self._staged: tuple[pa.Table | None, pa.Table | None] = (None, None)
        self.episodes = self._table(1) or self._create(1, EPISODE_SCHEMA)
        self.reload()

    # -- reading the committed state -------------------------------------------------------

    def reload(self) -> None:
        """The head of the episodes table as the committed state (and the steps rolled
        forward to it); the shards read from here on are the base of the next commit."""
        self.episodes.refresh()
        self.steps = self._table(0)
        self._read_head()
        self.base = dict(self.shards)
        self._roll_forward()

    def _read_head(self) -> None:
        """The export's committed state, from the newest snapshot of the episodes table's
        history that carries it; DatasetError if others changed its rows since."""
        state = _state_snapshot(self.episodes)
        _check_rows(self.episodes, state, self.names[1])
        props = dict(state.summary.additional_properties) if state is not None else {}
        other = props.get("rlmesh.group")
        if other and other != self.group:
            raise DatasetError(f"{self.source} is exported by consumer group {other}: one "
                               f"group writes a table (run with --group {other})")
        self.generation = int(props.get("rlmesh.generation", "0"))
        self.committed_offsets: dict[str, dict[str, int]] = json.loads(
            props.get("rlmesh.offsets", "{}"))
        self.shards: dict[str, str] = json.loads(props.get("rlmesh.shards", "{}"))

    def _table(self, which: int) -> Any:
        from pyiceberg.exceptions import NoSuchTableError

        try:
            return self.catalog.load_table(self.names[which])
        except NoSuchTableError:
            return None

    def _state_props(self) -> dict[str, str]:
        """The summary of the episodes snapshot that carries the committed state."""
        state = _state_snapshot(self.episodes)
        return dict(state.summary.additional_properties) if state is not None else {}

    def shard_state(self, shard: int) -> Any:
        """The committed JSON state of partition number `shard` (None: none yet)."""
        path = self.shards.get(str(shard))
        if path is None:
            return None
        try:
            with self.episodes.io.new_input(path).open() as f:
                return json.loads(f.read())
        except (OSError, ValueError) as exc:
            raise DatasetError(f"cannot read the export state {path} of {self.source} "
                               f"({exc})") from None

    def offsets(self, builder: str) -> dict[tuple[str, int], int]:
        out = {}
        for key, nxt in self.committed_offsets.get(builder, {}).items():
            topic, part = key.rsplit("|", 1)
            out[(topic, int(part))] = int(nxt)
        return out

    def head_offsets(self, builder: str) -> dict[tuple[str, int], int]:
        """The offsets of the table's head now (other members' commits included)."""
        self.episodes.refresh()
        self._read_head()
        return self.offsets(builder)

    # -- writing ---------------------------------------------------------------------------

    def stage(self, steps: pa.Table | None, episodes: pa.Table | None) -> None:
        """The next commit's rows."""
        self._staged = (steps, episodes)

    def commit(self, *, offsets: dict[str, dict[tuple[str, int], int]],
               shards: dict[int, Any]) -> None:
        """One episodes snapshot: the staged rows, this member's `shards`' states and their
        partitions' `offsets`, other members' entries as the head holds them. When the head
        moved since this member read it, the commit is made again on the new head, unless
        one of its shards was committed by someone else meanwhile: OffsetConflict (fenced,
        nothing written)."""
        from pyiceberg.exceptions import CommitFailedException

        steps_rows, episode_rows = self._staged
        self._staged = (None, None)
        commit_id = uuid.uuid4().hex
        paths = {str(n): f"{self.episodes.location()}/rlmesh-state/{commit_id}-{n}.json"
                 for n in shards}
        for n, value in shards.items():
            self._write(paths[str(n)], json.dumps(value, separators=(",", ":")).encode())
        steps_files = self._write_steps(steps_rows, commit_id)
        rows = episode_rows if episode_rows is not None else EPISODE_SCHEMA.empty_table()
        mine = {str(n) for n in shards}
        for _ in range(100):
            self._fence(mine)
            self._roll_forward()
            merged = {b: dict(o) for b, o in self.committed_offsets.items()}
            for builder, offs in offsets.items():
                merged.setdefault(builder, {}).update(
                    {f"{t}|{p}": n for (t, p), n in offs.items()})
            props = {"rlmesh.generation": str(self.generation + 1),
                     "rlmesh.offsets": json.dumps(merged, sort_keys=True),
                     "rlmesh.shards": json.dumps({**self.shards, **paths}, sort_keys=True),
                     "rlmesh.group": self.group, "rlmesh.commit": commit_id,
                     "rlmesh.steps-files": json.dumps(steps_files)}
            try:
                self.episodes.append(rows, snapshot_properties=props)
            except CommitFailedException:
                self.episodes.refresh()
                self._read_head()
                if self._state_props().get("rlmesh.commit") != commit_id:
                    continue  # the head moved: again on the new one, if still ours
            except (ValueError, NotImplementedError, ImportError) as exc:
                # the table's schema or partition spec changed in a way these rows
                # cannot be written in (a dropped column, a bucket partition)
                raise DatasetError(f"cannot append to {self.names[1]} as it is now "
                                   f"({type(exc).__name__}: {_first_line(exc)})") from None
            break
        else:
            raise DatasetError(f"{self.names[1]}: no commit landed in 100 attempts")
        self._read_head()
        self.base.update(paths)
        self._roll_forward()
        if self.generation % KEEP_SNAPSHOTS == 0:
            self._expire_snapshots()

    def _expire_snapshots(self) -> None:
        """Both tables' snapshots beyond the newest KEEP_SNAPSHOTS, expired (only the heads
        are read here), and the state files only expired snapshots named. On tables loaded
        apart: refreshing `episodes` without reading its head again would make the next
        commit merge a stale head's offsets. Best effort: a commit landing meanwhile wins,
        a later generation expires them."""
        from pyiceberg.exceptions import CommitFailedException, NoSuchTableError

        for name in self.names:
            try:
                table = self.catalog.load_table(name)
                snapshots = sorted(table.metadata.snapshots, key=lambda s: s.sequence_number)
                state = _state_snapshot(table)  # kept: others may have committed on top
                old = [s for s in snapshots[:-KEEP_SNAPSHOTS]
                       if state is None or s.snapshot_id != state.snapshot_id]
                if old:
                    table.maintenance.expire_snapshots().by_ids(
                        [s.snapshot_id for s in old]).commit()
                    self._delete_states(table, old, snapshots[-KEEP_SNAPSHOTS:])
            except (CommitFailedException, NoSuchTableError, ValueError) as exc:
                log.debug("snapshots of %s not expired now (%s)", name, exc)

    @staticmethod
    def _delete_states(table: Any, expired: list[Any], kept: list[Any]) -> None:
        """The shard state files named by `expired` snapshots and by none of `kept` (the
        head among them): only the head's are ever read, and a commit landing meanwhile
        names the head's files or new ones. Best effort: one left is only a small file."""
        def named(snapshots: list[Any]) -> set[str]:
            return {path for s in snapshots for path in json.loads(
                s.summary.additional_properties.get("rlmesh.shards", "{}")).values()}

        for path in sorted(named(expired) - named(kept)):
            try:
                table.io.delete(path)
            except OSError as exc:
                log.debug("state file %s not deleted (%s)", path, exc)

    def _fence(self, mine: set[str]) -> None:
        moved = sorted(n for n in mine if self.shards.get(n) != self.base.get(n))
        if moved:
            raise OffsetConflict(f"partition(s) {', '.join(moved)} of {self.names[1]} were "
                                 "committed by another process since this one read them: "
                                 "reading again from the offsets in the table")

    def _write(self, path: str, data: bytes) -> None:
        with self.episodes.io.new_output(path).create(overwrite=True) as f:
            f.write(data)

    def _write_steps(self, rows: pa.Table | None, commit_id: str) -> list[str]:
        """The step rows as Parquet files (one per env: the partition), not yet in the
        table: the episodes commit lists them, the roll-forward adds them."""
        if rows is None or not rows.num_rows:
            return []
        location = (self.steps.location() if self.steps is not None
                    else self.episodes.location().rsplit("/", 1)[0] + "/" +
                    self.names[0].rsplit(".", 1)[1])
        paths: list[str] = []
        for env_id in sorted(set(rows.column("env_id").to_pylist())):
            part = rows.filter(pa.compute.equal(rows.column("env_id"), env_id))
            path = f"{location}/data/env_id={_safe(env_id)}/{commit_id}-{len(paths)}.parquet"
            with self.episodes.io.new_output(path).create(overwrite=True) as f:
                pq.write_table(part, f)
            paths.append(path)
        return paths

    def _roll_forward(self) -> None:
        """Add the step files of the head's generation if the steps table does not have
        them yet (a crash, or a fenced process, between the two commits)."""
        from pyiceberg.exceptions import CommitFailedException

        props = self._state_props()
        files = json.loads(props.get("rlmesh.steps-files", "[]"))
        if self.steps is not None:
            _check_rows(self.steps, _state_snapshot(self.steps), self.names[0])
        if not files:
            return
        gen = int(props["rlmesh.generation"])
        if self.steps is None:
            with self.episodes.io.new_input(files[0]).open() as f:
                self.steps = self._create(0, pq.read_schema(f))
        for _ in range(20):
            state = _state_snapshot(self.steps)  # others may have committed on top
            done = int(state.summary.additional_properties["rlmesh.generation"]
                       ) if state is not None else -1
            if done >= gen:
                return
            try:
                self.steps.add_files(files, snapshot_properties={
                    "rlmesh.generation": str(gen), "rlmesh.commit": props["rlmesh.commit"]})
                return
            except CommitFailedException:
                self.steps.refresh()  # another process rolled it forward: look again
                _check_rows(self.steps, _state_snapshot(self.steps), self.names[0])
            except (ValueError, NotImplementedError, ImportError) as exc:
                raise DatasetError(f"cannot add the step rows of generation {gen} to "
                                   f"{self.names[0]} as it is now ({type(exc).__name__}: "
                                   f"{_first_line(exc)})") from None
        raise DatasetError(f"cannot add the steps of generation {gen} to {self.names[0]}")

    def _create(self, which: int, schema: pa.Schema) -> Any:
        from pyiceberg.exceptions import CommitFailedException, TableAlreadyExistsError

        try:
            txn = self.catalog.create_table_transaction(self.names[which], schema=schema,
                                                        properties=_TABLE_PROPERTIES)
            txn.update_spec().add_identity("env_id").commit()
            txn.append(schema.empty_table(), snapshot_properties={"rlmesh.created": "1"})
            txn.commit_transaction()
        except (TableAlreadyExistsError, CommitFailedException):
            existing = self._table(which)  # made by another process meanwhile?
            if existing is None:
                raise
            return existing
        return self.catalog.load_table(self.names[which])

    def close(self) -> None:
        pass


def _state_snapshot(table: Any) -> Any:
    """The newest snapshot of `table`'s history (the head and its ancestors) whose summary
    carries the export's state (`rlmesh.generation`); None when none does."""
    from pyiceberg.table.snapshots import ancestors_of

    for snapshot in ancestors_of(table.current_snapshot(), table.metadata):
        summary = snapshot.summary
        if summary is not None and "rlmesh.generation" in summary.additional_properties:
            return snapshot
    return None


def _live_rows(snapshot: Any) -> tuple[int, int]:
    """(rows less position deletes, equality deletes) of a table as of `snapshot`."""
    if snapshot is None:
        return 0, 0
    summary = snapshot.summary.additional_properties

    def total(name: str) -> int:
        return int(summary.get(name, "0") or 0)

    return (total("total-records") - total("total-position-deletes"),
            total("total-equality-deletes"))


def _check_rows(table: Any, state: Any, name: str) -> None:
    """DatasetError unless the commits others made on top of the snapshot carrying the
    state (`state`) left the rows as it left them."""
    head = table.current_snapshot()
    if head is None or (state is not None and head.snapshot_id == state.snapshot_id):
        return
    held, left = _live_rows(head), _live_rows(state)
    if held == left:
        return  # a compaction, an empty append, a schema or partition change
    if state is None:
        raise DatasetError(f"{name} holds {held[0]} rows and no snapshot of its history "
                           "carries the export's state (written by another writer, or "
                           "its snapshots expired): export into another --table")
    what = (f"{held[0]} rows where the export's last commit (snapshot {state.snapshot_id}) "
            f"left {left[0]}" if held[0] != left[0] else
            f"{held[1]} equality deletes where the export's last commit (snapshot "
            f"{state.snapshot_id}) left {left[1]}")
    raise DatasetError(f"{name} holds {what}: another writer changed its rows since "
                       f"(snapshot {head.snapshot_id} now), and the export can no longer "
                       "say which episodes it holds; roll the table back to that snapshot "
                       "or export into another --table")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class IcebergWriter:
    """Turns a batch of episodes into the two tables' rows, staged in the store."""

    def __init__(self, store: IcebergStore) -> None:
        self.store = store
        self.spaces: tuple[bytes, bytes] | None = None
        self._column_types: dict[tuple[bytes, bytes], Any] = {}

    def recover(self, state: dict[str, Any], generation: int) -> None:
        """Nothing to clean: files no snapshot lists are not part of the table."""

    def accepts(self, e: Episode) -> str | None:
        """One type per observation and action column of the steps table: episodes of
        spaces whose columns have the same types (the simulator's CartPole and Gymnasium's,
        whose Box bounds differ) share the table, each row's spaces in its episode row;
        other column types are skipped (`space_mismatch`)."""
        spaces = (e.obs_spec.SerializeToString(deterministic=True),
                  e.act_spec.SerializeToString(deterministic=True))
        if self.spaces is None:
            self.spaces = self._table_spaces() or spaces
        if spaces == self.spaces:
            return None
        held = self._column_types.get(self.spaces) or column_types(*self.spaces)
        self._column_types[self.spaces] = held
        return None if column_types(*spaces) == held else "space_mismatch"

    def _table_spaces(self) -> tuple[bytes, bytes] | None:
        episodes = self.store.episodes
        if episodes is None or self.store.steps is None:
            return None
        first = episodes.scan(selected_fields=("observation_space", "action_space"),
                              limit=1).to_arrow().to_pylist()
        return (first[0]["observation_space"], first[0]["action_space"]) if first else None

    def write(self, episodes: list[Episode], generation: int) -> dict[str, Any]:
        steps = _steps_table(episodes).replace_schema_metadata(None)
        envs = [env for e in episodes for env in [e.route["env_id"]] * e.length]
        steps = steps.append_column("env_id", pa.array(envs, pa.string()))
        if steps.schema.field("infos").type == pa.null():
            steps = steps.set_column(steps.schema.get_field_index("infos"), "infos",
                                     steps.column("infos").cast(pa.string()))
        rows = pa.Table.from_pylist([_episode_row(e) for e in episodes], schema=EPISODE_SCHEMA)
        self.store.stage(steps, rows)
        return {}

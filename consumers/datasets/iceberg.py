"""`--format iceberg`: episodes and steps as two Iceberg tables, exactly once, through pyiceberg.

`--table NS.NAME` is two tables in the catalog (pyiceberg's SQL catalog, named `rlmesh`:
`sqlite:///PATH` or `postgresql://...`; Java's JDBC catalog reads the same):
`NS.NAME_episodes` and `NS.NAME_steps`, the Parquet layout's columns (writers.py) plus
`env_id` in the steps, both partitioned by `env_id`.

Every env is exported. The episodes table holds them all (its columns are the same for any
space). A steps table's observation and action columns have one type each, so the steps of
an env whose columns would have other types than `NS.NAME_steps`' (those of the first env
exported) go to a steps table of its own, `NS.NAME_steps_<env>` (`steps_table_for`). Which
table holds which env, and the spaces that fix each table's column types, are part of the
committed state (`rlmesh.steps-tables`), decided inside the commit on the head it lands on,
so members exporting different envs at once agree.

One chain of commits, on the episodes table, is the source of truth. Each export commit
is one episodes snapshot holding the batch's episode rows and, in its summary,
`rlmesh.generation`, `rlmesh.offsets` (per builder and partition, the next offset: the
whole group's), `rlmesh.shards` (per partition number, a JSON state file beside the
data: that shard's joiner state and certificate), `rlmesh.group`, `rlmesh.steps-tables`
and `rlmesh.steps-files` (per steps table, the batch's step rows, written as Parquet
files before the commit). The steps tables follow: the files of the head's generation are
added (rolled forward) after the commit, before any later commit and whenever the table
is opened, so a crash between any two steps leaves either files no snapshot lists or a
committed generation whose step rows are added once.

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

Size: one commit protocol (the state's snapshot, the fencing, the steps files rolled
forward, the steps table per env, others' commits reconciled) whose invariants hold only
together; split, each piece would have to restate them.
"""

from __future__ import annotations

import base64
import json
import logging
import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from rlmesh_stream.consumers.datasets.manifest import DatasetError
from rlmesh_stream.consumers.datasets.model import Episode
from rlmesh_stream.consumers.datasets.per_env import column_types
from rlmesh_stream.consumers.datasets.writers import (
    EPISODE_SCHEMA,
    _safe,
    _steps_table,
    episode_row,
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


Spaces = tuple[bytes, bytes]  # (observation, action) SpaceSpec bytes


@dataclass(frozen=True)
class StepRows:
    """Step rows of one env whose spaces give one set of column types (`spaces`: those of
    its first episode): the rows of one Parquet file of a steps table."""

    env_id: str
    spaces: Spaces
    rows: pa.Table


@dataclass
class StepsTable:
    """A steps table as the committed state names it: the spaces that fix its observation
    and action column types, and the envs whose steps it holds."""

    spaces: Spaces
    envs: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"spaces": [base64.b64encode(b).decode() for b in self.spaces],
                "envs": self.envs}

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> StepsTable:
        obs, act = (base64.b64decode(b) for b in value["spaces"])
        return cls((obs, act), list(value["envs"]))


def table_part(env_id: str) -> str:
    """An env id as part of an Iceberg table name: lower case letters, digits and `_` (what
    Spark and Flink SQL take unquoted): `sim/CartPole-v1` -> `sim_cartpole_v1`."""
    return re.sub(r"[^a-z0-9_]", "_", env_id.lower()) or "_"


def steps_table_for(tables: dict[str, StepsTable], main: str, env_id: str, spaces: Spaces,
                    types: Any = None) -> str:
    """The steps table that holds `env_id`'s steps of `spaces`, assigned in `tables` if new:
    `main` when its column types are these (or it holds nothing yet), else the env's own,
    `main`_<env> (`_2`, `_3`, ... after it when that name holds other column types)."""
    def same(held: StepsTable) -> bool:
        return held.spaces == spaces or column_types(*held.spaces) == (
            types if types is not None else column_types(*spaces))

    def take(name: str) -> str:
        held = tables.setdefault(name, StepsTable(spaces))
        if env_id not in held.envs:
            held.envs.append(env_id)
        return name

    if main not in tables or same(tables[main]):
        return take(main)
    own = f"{main}_{table_part(env_id)}"
    for n in range(1, 1000):
        name = own if n == 1 else f"{own}_{n}"
        if name not in tables or same(tables[name]):
            return take(name)
    raise DatasetError(f"{env_id}: no steps table left for its column types (999 taken)")


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
        self._staged: tuple[list[StepRows], pa.Table | None] = ([], None)
        self._steps: dict[str, Any] = {}  # steps table name -> the table, as loaded
        self.episodes = self._table(self.names[1]) or self._create(self.names[1],
                                                                   EPISODE_SCHEMA)
        self.reload()

    # -- reading the committed state -------------------------------------------------------

    def reload(self) -> None:
        """The head of the episodes table as the committed state (and the steps rolled
        forward to it); the shards read from here on are the base of the next commit."""
        self.episodes.refresh()
        self._read_head()
        self._steps = {}
        for table in sorted({self.names[0], *self.steps_tables}):
            loaded = self._table(table)
            if loaded is not None:
                self._steps[table] = loaded
        self.base = dict(self.shards)
        self._roll_forward()

    @property
    def steps(self) -> Any:
        """The steps table `NS.NAME_steps` (None before its first rows)."""
        return self._steps.get(self.names[0])

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
        self.steps_tables: dict[str, StepsTable] = {
            name: StepsTable.from_json(value)
            for name, value in json.loads(props.get("rlmesh.steps-tables", "{}")).items()}

    def _table(self, name: str) -> Any:
        from pyiceberg.exceptions import NoSuchTableError

        try:
            return self.catalog.load_table(name)
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

    def stage(self, steps: list[StepRows], episodes: pa.Table | None) -> None:
        """The next commit's rows."""
        self._staged = (steps, episodes)

    def envs_by_steps_table(self) -> dict[str, list[str]]:
        """Per steps table the committed state names, the envs whose steps it holds."""
        return {name: list(held.envs) for name, held in sorted(self.steps_tables.items())}

    def commit(self, *, offsets: dict[str, dict[tuple[str, int], int]],
               shards: dict[int, Any]) -> None:
        """One episodes snapshot: the staged rows, this member's `shards`' states and their
        partitions' `offsets`, other members' entries as the head holds them. When the head
        moved since this member read it, the commit is made again on the new head, unless
        one of its shards was committed by someone else meanwhile: OffsetConflict (fenced,
        nothing written)."""
        from pyiceberg.exceptions import CommitFailedException

        steps_rows, episode_rows = self._staged
        self._staged = ([], None)
        commit_id = uuid.uuid4().hex
        paths = {str(n): f"{self.episodes.location()}/rlmesh-state/{commit_id}-{n}.json"
                 for n in shards}
        for n, value in shards.items():
            self._write(paths[str(n)], json.dumps(value, separators=(",", ":")).encode())
        written: dict[tuple[str, int], str] = {}  # (steps table, rows) -> its file
        rows = episode_rows if episode_rows is not None else EPISODE_SCHEMA.empty_table()
        mine = {str(n) for n in shards}
        for _ in range(100):
            self._fence(mine)
            self._roll_forward()
            # each env's steps table as the head decides (another member may have given
            # the first column types to the main table since this one read it)
            tables = self._tables_of_head()
            steps_files = self._write_steps(steps_rows, tables, commit_id, written)
            merged = {b: dict(o) for b, o in self.committed_offsets.items()}
            for builder, offs in offsets.items():
                merged.setdefault(builder, {}).update(
                    {f"{t}|{p}": n for (t, p), n in offs.items()})
            props = {"rlmesh.generation": str(self.generation + 1),
                     "rlmesh.offsets": json.dumps(merged, sort_keys=True),
                     "rlmesh.shards": json.dumps({**self.shards, **paths}, sort_keys=True),
                     "rlmesh.group": self.group, "rlmesh.commit": commit_id,
                     "rlmesh.steps-tables": json.dumps(
                         {name: held.to_json() for name, held in sorted(tables.items())},
                         separators=(",", ":")),
                     "rlmesh.steps-files": json.dumps(steps_files, sort_keys=True)}
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

        for name in sorted({*self.names, *self.steps_tables}):
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

    def _tables_of_head(self) -> dict[str, StepsTable]:
        """The steps tables the head names (a copy the commit adds to). A head written
        before they were named (one steps table, its types those of the first episode
        row's spaces) names the main one."""
        tables = {name: StepsTable(held.spaces, list(held.envs))
                  for name, held in self.steps_tables.items()}
        if not tables and self.steps is not None:
            first = self.episodes.scan(selected_fields=("env_id", "observation_space",
                                                        "action_space"),
                                       limit=1).to_arrow().to_pylist()
            if first:
                tables[self.names[0]] = StepsTable(
                    (first[0]["observation_space"], first[0]["action_space"]), [])
        return tables

    def _location(self, name: str) -> str:
        table = self._steps.get(name)
        if table is not None:
            return str(table.location())
        return self.episodes.location().rsplit("/", 1)[0] + "/" + name.rsplit(".", 1)[1]

    def _write_steps(self, staged: list[StepRows], tables: dict[str, StepsTable],
                     commit_id: str, written: dict[tuple[str, int], str]
                     ) -> dict[str, list[str]]:
        """Per steps table (assigned in `tables` as `steps_table_for` routes each env), the
        staged rows as Parquet files (one per env and column types: the partition), not yet
        in the table: the episodes commit lists them, the roll-forward adds them. `written`
        keeps the files of an earlier attempt whose table is still the same."""
        files: dict[str, list[str]] = {}
        types: dict[Spaces, Any] = {}
        for i, part in enumerate(staged):
            if not part.rows.num_rows:
                continue
            key = types.setdefault(part.spaces, column_types(*part.spaces))
            name = steps_table_for(tables, self.names[0], part.env_id, part.spaces, key)
            path = written.get((name, i))
            if path is None:
                path = (f"{self._location(name)}/data/env_id={_safe(part.env_id)}/"
                        f"{commit_id}-{i}.parquet")
                with self.episodes.io.new_output(path).create(overwrite=True) as f:
                    pq.write_table(part.rows, f)
                written[(name, i)] = path
            files.setdefault(name, []).append(path)
        return files

    def _roll_forward(self) -> None:
        """Add the step files of the head's generation to each steps table that does not
        have them yet (a crash, or a fenced process, between the commits)."""
        props = self._state_props()
        files = json.loads(props.get("rlmesh.steps-files", "[]"))
        if isinstance(files, list):  # one steps table (before others were named)
            files = {self.names[0]: files} if files else {}
        for name, table in sorted(self._steps.items()):
            _check_rows(table, _state_snapshot(table), name)
        if not files:
            return
        gen = int(props["rlmesh.generation"])
        for name, paths in sorted(files.items()):
            self._add_steps(name, paths, gen, props["rlmesh.commit"])

    def _add_steps(self, name: str, paths: list[str], gen: int, commit: str) -> None:
        from pyiceberg.exceptions import CommitFailedException

        table = self._steps.get(name)
        if table is None:
            table = self._table(name)
            if table is None:
                with self.episodes.io.new_input(paths[0]).open() as f:
                    table = self._create(name, pq.read_schema(f))
            self._steps[name] = table
        for _ in range(20):
            state = _state_snapshot(table)  # others may have committed on top
            done = int(state.summary.additional_properties["rlmesh.generation"]
                       ) if state is not None else -1
            if done >= gen:
                return
            try:
                table.add_files(paths, snapshot_properties={
                    "rlmesh.generation": str(gen), "rlmesh.commit": commit})
                return
            except CommitFailedException:
                table.refresh()  # another process rolled it forward: look again
                _check_rows(table, _state_snapshot(table), name)
            except (ValueError, NotImplementedError, ImportError) as exc:
                raise DatasetError(f"cannot add the step rows of generation {gen} to "
                                   f"{name} as it is now ({type(exc).__name__}: "
                                   f"{_first_line(exc)})") from None
        raise DatasetError(f"cannot add the steps of generation {gen} to {name}")

    def _create(self, name: str, schema: pa.Schema) -> Any:
        from pyiceberg.exceptions import CommitFailedException, TableAlreadyExistsError

        try:
            txn = self.catalog.create_table_transaction(name, schema=schema,
                                                        properties=_TABLE_PROPERTIES)
            txn.update_spec().add_identity("env_id").commit()
            txn.append(schema.empty_table(), snapshot_properties={"rlmesh.created": "1"})
            txn.commit_transaction()
        except (TableAlreadyExistsError, CommitFailedException):
            existing = self._table(name)  # made by another process meanwhile?
            if existing is None:
                raise
            return existing
        return self.catalog.load_table(name)

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
    """Turns a batch of episodes into the tables' rows, staged in the store: every episode
    is written (the store puts an env whose column types differ in a steps table of its
    own)."""

    def __init__(self, store: IcebergStore) -> None:
        self.store = store

    def recover(self, state: dict[str, Any], generation: int) -> None:
        """Nothing to clean: files no snapshot lists are not part of the table."""

    def write(self, episodes: list[Episode], generation: int) -> dict[str, Any]:
        groups: dict[tuple[str, Any], list[Episode]] = {}
        spaces: dict[tuple[str, Any], Spaces] = {}
        types: dict[Spaces, Any] = {}
        for e in episodes:
            pair = e.space_bytes()
            key = (e.route["env_id"], types.setdefault(pair, column_types(*pair)))
            groups.setdefault(key, []).append(e)
            spaces.setdefault(key, pair)
        staged = []
        # by env id: in a batch of several envs, the first in that order takes the main
        # steps table when it holds nothing yet
        for key, group in sorted(groups.items(), key=lambda kv: kv[0][0]):
            steps = _steps_table(group).replace_schema_metadata(None)
            steps = steps.append_column("env_id", pa.array([key[0]] * steps.num_rows,
                                                           pa.string()))
            if steps.schema.field("infos").type == pa.null():
                steps = steps.set_column(steps.schema.get_field_index("infos"), "infos",
                                         steps.column("infos").cast(pa.string()))
            staged.append(StepRows(key[0], spaces[key], steps))
        rows = pa.Table.from_pylist([episode_row(e) for e in episodes], schema=EPISODE_SCHEMA)
        self.store.stage(staged, rows)
        return {}

"""`--format iceberg`: episodes and steps as two Iceberg tables, exactly once, through pyiceberg.

`--table NS.NAME` is two tables in the catalog (pyiceberg's SQL catalog: `sqlite:///PATH`
or `postgresql://...`; Java's JDBC catalog reads the same): `NS.NAME_steps` and
`NS.NAME_episodes`, the Parquet layout's columns (writers.py) plus `env_id` in the steps,
both partitioned by `env_id`.

One chain of commits, on the steps table, is the source of truth. Each export commit is
one steps snapshot whose summary holds what the dataset manifest holds elsewhere:
`rlmesh.generation`, `rlmesh.offsets` (per builder and partition, the next offset),
`rlmesh.state` (a JSON file beside the data: the joiner's state and the certificate),
`rlmesh.group`, and `rlmesh.episodes-files` (the batch's episode rows, written as Parquet
files before the commit). The episodes table follows: its snapshot adding a generation's
files carries `rlmesh.generation`, and before any commit, and when opened, the files of a
steps generation the episodes table lacks are added (rolled forward). So a crash between
any two steps leaves either no trace of a batch (files nobody lists) or a committed one
whose episode rows are added by the next run; never a row twice.

Fencing: every commit is pyiceberg's optimistic commit (`AssertRefSnapshotId`, retries
off): it lands only if the steps table's head is still the snapshot this process last
read. A process claims the table when partitions are assigned to it (an empty snapshot),
so a process paused past its session timeout (a zombie) whose partitions moved finds the
head changed, commits nothing, and reads again from the offsets in the table.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from rlmesh_stream.consumers.datasets.manifest import Committed, DatasetError
from rlmesh_stream.consumers.datasets.model import Episode
from rlmesh_stream.consumers.datasets.writers import _episode_row, _safe, _steps_table
from rlmesh_stream.consumers.sinks.base import OffsetConflict

EPISODE_SCHEMA = pa.schema([
    ("session_id", pa.string()), ("episode_record_id", pa.string()),
    ("episode_id", pa.string()), ("env_id", pa.string()), ("env_component_id", pa.string()),
    ("model_component_id", pa.string()), ("lane", pa.int64()), ("env_index", pa.int64()),
    ("seed", pa.int64()), ("trial_index", pa.int64()), ("steps", pa.int64()),
    ("total_reward", pa.float64()), ("terminated", pa.bool_()), ("truncated", pa.bool_()),
    ("success", pa.bool_()), ("terminal_observation", pa.bool_()), ("abandoned", pa.bool_()),
    ("caution", pa.bool_()), ("observation_space", pa.binary()),
    ("action_space", pa.binary()),
])
_NO_RETRIES = {"commit.retry.num-retries": "0"}  # a conflict is ours to decide: fenced


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
    """The committed state, read from and written to the steps table's snapshots."""

    def __init__(self, target: IcebergTarget, group: str) -> None:
        check_target(target)
        self.target = target
        self.group = group
        self.catalog = _catalog(target)
        namespace, name = target.table.rsplit(".", 1)
        try:
            self.catalog.create_namespace_if_not_exists(namespace)
        except Exception as exc:
            raise DatasetError(f"cannot use namespace {namespace} in {target.catalog} "
                               f"({type(exc).__name__}: {str(exc).splitlines()[0]})") from None
        self.names = (f"{namespace}.{name}_steps", f"{namespace}.{name}_episodes")
        self.source = f"table {target.table} in {target.catalog}"
        self._staged: tuple[pa.Table | None, pa.Table | None] = (None, None)
        self.reload()

    # -- reading the committed state -------------------------------------------------------

    def reload(self) -> None:
        """The head of the steps table as the committed state (and roll the episodes
        forward to it)."""
        self.steps = self._table(0)
        self.episodes = self._table(1)
        self.committed = Committed(format="iceberg", dataset_id=self.target.table)
        self.pending_state: Any = None
        props = self._head_props()
        if props.get("rlmesh.generation") is None:
            return
        other = props.get("rlmesh.group")
        if other and other != self.group:
            raise DatasetError(f"{self.source} is exported by consumer group {other}: one "
                               f"group writes a table (run with --group {other})")
        saved = self._read_state(props["rlmesh.state"]) if props.get("rlmesh.state") else {}
        self.committed = Committed(generation=int(props["rlmesh.generation"]),
                                   format="iceberg", dataset_id=self.target.table,
                                   offsets=json.loads(props["rlmesh.offsets"]),
                                   writer={}, certificate=saved.get("certificate", {}))
        self.pending_state = saved.get("joiner_state")
        self._roll_forward()

    def _table(self, which: int) -> Any:
        from pyiceberg.exceptions import NoSuchTableError

        try:
            return self.catalog.load_table(self.names[which])
        except NoSuchTableError:
            return None

    def _head_props(self) -> dict[str, str]:
        head = self.steps.current_snapshot() if self.steps is not None else None
        return dict(head.summary.additional_properties) if head is not None else {}

    def _read_state(self, path: str) -> dict[str, Any]:
        try:
            with self.steps.io.new_input(path).open() as f:
                data = json.loads(f.read())
        except (OSError, ValueError) as exc:
            raise DatasetError(f"cannot read the export state {path} of {self.source} "
                               f"({exc})") from None
        if not isinstance(data, dict):
            raise DatasetError(f"{path} of {self.source} is not an export state")
        return data

    def offsets(self, builder: str) -> dict[tuple[str, int], int]:
        out = {}
        for key, nxt in self.committed.offsets.get(builder, {}).items():
            topic, part = key.rsplit("|", 1)
            out[(topic, int(part))] = int(nxt)
        return out

    # -- writing ---------------------------------------------------------------------------

    def stage(self, steps: pa.Table | None, episodes: pa.Table | None) -> None:
        """The next commit's rows."""
        self._staged = (steps, episodes)

    def claim(self) -> None:
        """An empty commit: a process that read the head before this one can no longer
        commit (it is fenced); nothing in the committed state changes."""
        if self.steps is None:
            return  # nothing to fence yet: the first commit creates the tables
        self.stage(None, None)
        self.commit(offsets={b: self.offsets(b) for b in self.committed.offsets},
                    writer={}, joiner_state=self.pending_state,
                    certificate=self.committed.certificate, claim=True)

    def commit(self, *, offsets: dict[str, dict[tuple[str, int], int]], writer: dict[str, Any],
               joiner_state: Any, certificate: dict[str, Any], claim: bool = False) -> None:
        """One steps snapshot holding the staged rows, the offsets and the state; raises
        OffsetConflict when the head moved since it was read (fenced: nothing written)."""
        steps_rows, episode_rows = self._staged
        self._staged = (None, None)
        gen = self.committed.generation + (0 if claim else 1)
        merged = {builder: {f"{t}|{p}": n for (t, p), n in sorted(o.items())}
                  for builder, o in offsets.items()}
        if self.steps is None and steps_rows is None:
            # nothing exported yet, so no table to hold the offsets: kept in memory (a
            # restart reads from the start again, as it would with them)
            self._committed(gen, merged, certificate, joiner_state)
            return
        self._ensure_tables(steps_rows)
        self._roll_forward()
        commit_id = uuid.uuid4().hex
        state_path = f"{self.steps.location()}/rlmesh-state/{commit_id}.json"
        self._write(state_path, json.dumps({"joiner_state": joiner_state,
                                            "certificate": certificate}).encode())
        files = self._write_episodes(episode_rows, commit_id) if not claim else []
        props = {"rlmesh.generation": str(gen), "rlmesh.offsets": json.dumps(merged),
                 "rlmesh.state": state_path, "rlmesh.group": self.group,
                 "rlmesh.commit": commit_id, "rlmesh.episodes-files": json.dumps(files)}
        self._append(steps_rows, props)
        self._committed(gen, merged, certificate, joiner_state)
        self._roll_forward()

    def _committed(self, gen: int, offsets: dict[str, dict[str, int]],
                   certificate: dict[str, Any], joiner_state: Any) -> None:
        self.committed = Committed(generation=gen, format="iceberg",
                                   dataset_id=self.target.table, offsets=offsets, writer={},
                                   certificate=certificate)
        self.pending_state = joiner_state

    def _append(self, rows: pa.Table | None, props: dict[str, str]) -> None:
        from pyiceberg.exceptions import CommitFailedException

        if rows is None:
            rows = self.steps.schema().as_arrow().empty_table()
        try:
            self.steps.append(rows, snapshot_properties=props)
        except CommitFailedException as exc:
            self.steps.refresh()
            if self._head_props().get("rlmesh.commit") == props["rlmesh.commit"]:
                return  # it landed; only the answer was lost
            raise OffsetConflict(f"{self.names[0]} was committed to by another process "
                                 f"since this one read it ({exc}): reading again from "
                                 "its offsets") from None

    def _write(self, path: str, data: bytes) -> None:
        with self.steps.io.new_output(path).create(overwrite=True) as f:
            f.write(data)

    def _write_episodes(self, rows: pa.Table | None, commit_id: str) -> list[str]:
        """The episode rows as Parquet files (one per env: the partition), not yet in the
        table: the steps commit lists them, the roll-forward adds them."""
        if rows is None or not rows.num_rows:
            return []
        paths: list[str] = []
        for env_id in sorted(set(rows.column("env_id").to_pylist())):
            part = rows.filter(pa.compute.equal(rows.column("env_id"), env_id))
            path = (f"{self.episodes.location()}/data/env_id={_safe(env_id)}/"
                    f"{commit_id}-{len(paths)}.parquet")
            with self.episodes.io.new_output(path).create(overwrite=True) as f:
                pq.write_table(part, f)
            paths.append(path)
        return paths

    def _roll_forward(self) -> None:
        """Add the episode files of the steps head's generation if the episodes table does
        not have them yet (a crash, or a fenced process, between the two commits)."""
        from pyiceberg.exceptions import CommitFailedException

        props = self._head_props()
        files = json.loads(props.get("rlmesh.episodes-files", "[]"))
        if not files or self.episodes is None:
            return
        gen = int(props["rlmesh.generation"])
        for _ in range(5):
            head = self.episodes.current_snapshot()
            done = int(head.summary.additional_properties.get("rlmesh.generation", "-1")
                       ) if head is not None else -1
            if done >= gen:
                return
            try:
                self.episodes.add_files(files, snapshot_properties={
                    "rlmesh.generation": str(gen), "rlmesh.commit": props["rlmesh.commit"]})
                return
            except CommitFailedException:
                self.episodes.refresh()  # another process rolled it forward: look again
        raise DatasetError(f"cannot add the episodes of generation {gen} to {self.names[1]}")

    def _ensure_tables(self, steps_rows: pa.Table | None) -> None:
        """Create both tables (partitioned by env_id, an empty first snapshot) with the
        first batch's step schema."""
        if self.episodes is None:
            self.episodes = self._create(1, EPISODE_SCHEMA)
        if self.steps is None and steps_rows is not None:
            self.steps = self._create(0, steps_rows.schema)
        if self.steps is None:
            raise DatasetError("internal: the steps table is made by the first batch")

    def _create(self, which: int, schema: pa.Schema) -> Any:
        from pyiceberg.exceptions import TableAlreadyExistsError

        try:
            txn = self.catalog.create_table_transaction(self.names[which], schema=schema,
                                                        properties=_NO_RETRIES)
            txn.update_spec().add_identity("env_id").commit()
            txn.append(schema.empty_table(), snapshot_properties={"rlmesh.created": "1"})
            txn.commit_transaction()
        except TableAlreadyExistsError:
            pass  # made by another process meanwhile
        return self.catalog.load_table(self.names[which])

    def close(self) -> None:
        pass


class IcebergWriter:
    """Turns a batch of episodes into the two tables' rows, staged in the store."""

    def __init__(self, store: IcebergStore) -> None:
        self.store = store
        self.spaces: tuple[bytes, bytes] | None = None

    def recover(self, state: dict[str, Any], generation: int) -> None:
        """Nothing to clean: files no snapshot lists are not part of the table."""

    def accepts(self, e: Episode) -> str | None:
        """One pair of spaces per steps table (its columns' types)."""
        spaces = (e.obs_spec.SerializeToString(deterministic=True),
                  e.act_spec.SerializeToString(deterministic=True))
        if self.spaces is None:
            self.spaces = self._table_spaces() or spaces
        return None if spaces == self.spaces else "space_mismatch"

    def _table_spaces(self) -> tuple[bytes, bytes] | None:
        episodes = self.store.episodes
        if episodes is None or self.store.steps is None:
            return None
        first = episodes.scan(selected_fields=("observation_space", "action_space"),
                              limit=1).to_arrow().to_pylist()
        return (first[0]["observation_space"], first[0]["action_space"]) if first else None

    def write(self, episodes: list[Episode], generation: int) -> dict[str, Any]:
        steps = _steps_table(episodes).replace_schema_metadata(None)
        envs = [e.route["env_id"] for e in episodes for _ in e.steps]
        steps = steps.append_column("env_id", pa.array(envs, pa.string()))
        if steps.schema.field("infos").type == pa.null():
            steps = steps.set_column(steps.schema.get_field_index("infos"), "infos",
                                     steps.column("infos").cast(pa.string()))
        rows = pa.Table.from_pylist([_episode_row(e) for e in episodes], schema=EPISODE_SCHEMA)
        self.store.stage(steps, rows)
        return {}

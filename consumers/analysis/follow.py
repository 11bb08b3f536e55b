"""`join --follow`: each checkpoint's fleet evaluation written into TensorBoard and MLflow
while training runs.

Where the episodes come from: the follower reads the episode topics itself, as a
consumer group of its own, through the consumers' runtime and episodes builder
into a DuckDB file that only it writes (`--sink`): episodes and the group's offsets
are committed in one transaction, so a restart (a SIGKILL included) reads on from
exactly what its store holds. Not from a table a live `consume` keeps: a DuckDB
store is locked by its one writing process (no other process can open it, even to
read), so that would work with PostgreSQL only, and would couple the follower's
latency to another process's checkpoints.

What is written is the batch `join`'s own summary: each pass copies the store's
episodes (one transaction: a consistent cut) into an in-memory DuckDB, runs the same
`run_join` and `aggregate` over it and the training log as read now, and writes the
rows of the checkpoints that are complete and not yet written.

Each event type is a topic of its own, so a session's end can be read before its last
episodes' events: the builder then marks an episode whose completion is not read yet
`abandoned`, and an episode whose start is not read yet is not there at all. A session
is therefore *all read* only once its end is read and, for a `session_ended`, the store
holds as many of its episodes completed as the event's `total_episodes` (a
`session_failed` has no count: its end is taken as it is). Until then its `abandoned`
episodes are not final, and it counts as open.

A checkpoint is complete when each of its episodes is final (completed, or abandoned in
a session all read), and:
- by default, every session that published an episode of it is all read: the eval
  sessions of that checkpoint are over;
- with `--eval-episodes N`, instead: N of its episodes are final, whatever its sessions
  (those of one checkpoint may run one after another: the first may end before the next
  has published anything);
- or, with `--quiet-seconds S` besides either: none of its episodes is running and none
  was added or changed for S seconds (the one way out when a session's reported episodes
  never all arrive).

Each checkpoint is written once, appended: one event of our own eval file in the
`--to-tensorboard` directory (a new file per follower process, flushed per point),
one `log_batch` into the `--to-mlflow-run` run. What is already written is read back
from the outputs themselves at start (the `eval/episodes` steps of our eval files,
the run's `eval/episodes` history), so a restart writes what is missing and nothing
twice; a record torn by a SIGKILL mid-write is cut off first (it was never a point).
Episodes of a checkpoint that arrive after its point was written are not in it:
they are counted (the checkpoint's episodes now, minus the `eval/episodes` written)
and shown in the status lines and at the end; a batch `join` counts them.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from rlmesh_stream.consumers.analysis.join import (
    JoinError,
    JoinSpec,
    aggregate,
    run_join,
)
from rlmesh_stream.consumers.analysis.join.outputs import group_sql
from rlmesh_stream.consumers.analysis.training_logs.table import TrainingLogError
from rlmesh_stream.consumers.analysis.training_logs.writeback import (
    TB_SUFFIX,
    EvalFileWriter,
    eval_points,
)
from rlmesh_stream.consumers.tables import EPISODE_SESSION_ENDS, EPISODES

log = logging.getLogger(__name__)

EPISODES_METRIC = "eval/episodes"
"""Every point has it: its steps in an output are the checkpoints written there."""


@dataclass(frozen=True)
class Rule:
    """When a checkpoint's evaluation is complete (besides all its sessions ended)."""

    eval_episodes: int | None = None
    quiet_s: float | None = None


@dataclass
class Checkpoint:
    """What the follower knows of one checkpoint in this pass."""

    name: str
    step: int | None
    episodes: int
    running: int
    unread: int  # abandoned in a session not all read: their completion may be unread yet
    open_sessions: int  # no end read
    unread_sessions: int  # end read, fewer of its episodes completed than it reported
    changed_at: float  # monotonic time its counts last changed

    def complete(self, rule: Rule, now: float) -> bool:
        if self.running or not self.episodes:
            return False
        quiet = rule.quiet_s is not None and now - self.changed_at >= rule.quiet_s
        if self.unread:  # they may yet complete: only a quiet spell settles them
            return quiet
        if rule.eval_episodes is not None:  # instead of the sessions rule
            return self.episodes >= rule.eval_episodes or quiet
        return (self.open_sessions == 0 and self.unread_sessions == 0) or quiet


# -- outputs ---------------------------------------------------------------------------------


class TensorBoardOutput:
    """Eval points appended to our event files in a directory; what is there, read back."""

    def __init__(self, directory: Path) -> None:
        if directory.exists() and not directory.is_dir():
            raise TrainingLogError(f"--to-tensorboard {directory} is a file, not a directory")
        self.directory = directory
        self.where = str(directory)
        self._writer: EvalFileWriter | None = None

    def written(self) -> dict[int, float]:
        """Step -> eval/episodes of every point in our eval files (torn tails cut first)."""
        from rlmesh_stream.consumers.analysis.training_logs.tensorboard import (
            file_points,
            records_end,
        )

        found: dict[int, float] = {}
        if not self.directory.is_dir():
            return found
        for path in sorted(self.directory.glob(f"events.out.tfevents.*{TB_SUFFIX}")):
            size = path.stat().st_size
            end, _ = records_end(path, size)
            if end != size:  # a write cut short by a kill: never a whole point
                log.warning("cutting a torn record off %s (bytes %d to %d)", path, end, size)
                with open(path, "r+b") as file:
                    file.truncate(end)
            for _run, tag, step, _wall, value in file_points(path, ".", {}):
                if tag == EPISODES_METRIC:
                    found[step] = value
        return found

    def write(self, step: int, metrics: dict[str, float]) -> None:
        if self._writer is None:
            self._writer = EvalFileWriter(self.directory)
        self._writer.write(step, metrics)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()


class MlflowOutput:
    """Eval points logged into an existing MLflow run; its eval/episodes history read back."""

    def __init__(self, run_id: str, tracking_uri: str | None) -> None:
        from rlmesh_stream.consumers.analysis.training_logs.mlflow import client, get_run

        self.run_id, self.tracking_uri = run_id, tracking_uri
        self.where = f"MLflow run {run_id}"
        self._client = client(tracking_uri)
        get_run(self._client, run_id, tracking_uri)

    def written(self) -> dict[int, float]:
        from rlmesh_stream.consumers.analysis.training_logs.mlflow import mlflow_errors

        with mlflow_errors(self.tracking_uri):
            return {int(m.step): float(m.value)
                    for m in self._client.get_metric_history(self.run_id, EPISODES_METRIC)}

    def write(self, step: int, metrics: dict[str, float]) -> None:
        from mlflow.entities import Metric

        from rlmesh_stream.consumers.analysis.training_logs.mlflow import mlflow_errors

        now = int(time.time() * 1000)
        with mlflow_errors(self.tracking_uri):  # one batch: the checkpoint's metrics at once
            self._client.log_batch(self.run_id, metrics=[
                Metric(key, value, now, step) for key, value in metrics.items()])

    def close(self) -> None:
        """Nothing held open."""


Output = TensorBoardOutput | MlflowOutput


# -- the follower ----------------------------------------------------------------------------


class LogCache:
    """A TensorBoard log read again only when its event files changed (names, sizes, times):
    without TensorFlow, reading checks every record's CRC in Python (~10 000 scalars a
    second here), too slow to repeat every half second over a long run's log. MLflow
    runs (and file logs) are read by the join itself on each pass."""

    def __init__(self, spec: JoinSpec) -> None:
        self.spec = spec
        self._signature: tuple[tuple[str, int, int], ...] | None = None
        self._table: pa.Table | None = None

    def table(self) -> pa.Table | None:
        from rlmesh_stream.consumers.analysis.training_logs.tensorboard import (
            event_files,
            is_tensorboard_log,
            read_tensorboard,
        )

        log = self.spec.log
        if log is None or self.spec.log_format is not None or not is_tensorboard_log(log):
            return None
        stats = [(f, f.stat()) for f in event_files(log)]
        signature = tuple((str(f), st.st_size, st.st_mtime_ns) for f, st in stats)
        if signature != self._signature or self._table is None:
            self._table = read_tensorboard(log)  # TrainingLogError: the pass waits
            self._signature = signature
        return self._table


@dataclass
class Follower:
    """One pass at a time: the store's episodes and the log joined, complete checkpoints
    written to every output that lacks them."""

    spec: JoinSpec
    outputs: list[Output]
    rule: Rule = Rule()
    say: Callable[[str], None] = print
    written: dict[str, dict[int, float]] = field(default_factory=dict)  # where -> step -> n
    checkpoints: dict[str, Checkpoint] = field(default_factory=dict)
    points: int = 0  # checkpoints written by this process
    _status: str = ""
    _log: LogCache | None = None

    def start(self) -> None:
        """Read back what every output already holds."""
        for out in self.outputs:
            self.written[out.where] = out.written()
            if self.written[out.where]:
                self.say(f"{out.where} already holds {len(self.written[out.where])} "
                         "checkpoint(s); writing only the others")

    def step(self, store: duckdb.DuckDBPyConnection, now: float | None = None) -> int:
        """One pass over a snapshot of the store (`store` attached as `store`); the number
        of checkpoints written. A join that cannot be made yet is shown as what it waits
        for."""
        now = time.monotonic() if now is None else now
        if self._log is None:
            self._log = LogCache(self.spec)
        try:
            result = run_join(store, self.spec, self._log.table())
        except (JoinError, TrainingLogError, OSError) as exc:  # e.g. a log file mid-write
            self._show(f"waiting: {exc}")
            return 0
        rows = aggregate(store, self.spec, result)
        self._update_counts(store, result, now)
        by_name = {str(r["checkpoint"]): r for r in rows}
        done = 0
        for name, ck in sorted(self.checkpoints.items(),
                               key=lambda kv: (kv[1].step is None, kv[1].step or 0, kv[0])):
            if ck.step is None or not ck.complete(self.rule, now):
                continue
            missing = [o for o in self.outputs if ck.step not in self.written[o.where]]
            if not missing or name not in by_name:
                continue
            metrics = eval_points([by_name[name]]).by_step[ck.step]
            try:
                for out in missing:
                    out.write(ck.step, metrics)
                    self.written[out.where][ck.step] = metrics[EPISODES_METRIC]
            except (TrainingLogError, OSError) as exc:  # a server away: the next pass retries
                self._show(f"waiting: cannot write {name} to {out.where} ({exc}); retrying")
                return done
            done += 1
            self.points += 1
            self.say(f"wrote {name} (step {ck.step}): {ck.episodes} episodes, "
                     f"mean reward {_fmt(by_name[name].get('mean_reward'))}, success "
                     f"{_fmt(by_name[name].get('success_rate'))} to "
                     + ", ".join(o.where for o in missing))
        self._show(self.status())
        return done

    def _update_counts(self, store: duckdb.DuckDBPyConnection, result: Any, now: float) -> None:
        label, groups, step = group_sql(self.spec, result)
        # ended sessions whose episodes are all read: as many completed (in the whole
        # store, matched or not) as their session_ended reported; a failure has no count
        ends, episodes = f"store.{EPISODE_SESSION_ENDS.name}", f"store.{EPISODES.name}"
        rows = store.execute(f"""
            WITH all_read AS (
                SELECT x.session_id FROM {ends} x
                WHERE x.total_episodes IS NULL OR x.total_episodes <= (
                    SELECT COUNT(*) FROM {episodes} e
                    WHERE e.session_id = x.session_id AND e.status = 'completed'))
            SELECT {label}, MIN({step}), COUNT(*), COUNT(*) FILTER (WHERE status = 'running'),
                   COUNT(*) FILTER (WHERE status = 'abandoned' AND session_id NOT IN
                       (SELECT session_id FROM all_read)),
                   COUNT(DISTINCT session_id) FILTER (WHERE session_id NOT IN
                       (SELECT session_id FROM {ends})),
                   COUNT(DISTINCT session_id) FILTER (WHERE session_id IN
                       (SELECT session_id FROM {ends} EXCEPT SELECT session_id FROM all_read))
            FROM joined GROUP BY {groups}""").fetchall()
        seen: dict[str, Checkpoint] = {}
        for name, ck_step, *counts in rows:
            n_episodes, running, unread, open_sessions, unread_sessions = map(int, counts)
            old = self.checkpoints.get(name)
            changed = old is None or (old.episodes, old.running, old.unread) != (
                n_episodes, running, unread)
            seen[name] = Checkpoint(name, None if ck_step is None else int(ck_step),
                                    n_episodes, running, unread, open_sessions,
                                    unread_sessions,
                                    now if changed or old is None else old.changed_at)
        self.checkpoints = seen

    def late(self) -> dict[str, int]:
        """Checkpoint -> episodes that arrived after its point was written (not in it)."""
        late: dict[str, int] = {}
        for name, ck in self.checkpoints.items():
            for written in self.written.values():
                if ck.step is not None and ck.step in written:
                    extra = ck.episodes - int(written[ck.step])
                    if extra > 0:
                        late[name] = max(late.get(name, 0), extra)
        return late

    def status(self) -> str:
        """What is written, what is waited for and why, what came late."""
        written = sum(1 for ck in self.checkpoints.values()
                      if ck.step is not None
                      and all(ck.step in w for w in self.written.values()))
        waiting = []
        for ck in sorted(self.checkpoints.values(), key=lambda c: (c.step is None, c.step or 0)):
            if ck.step is not None and all(ck.step in w for w in self.written.values()):
                continue
            why = []
            if ck.running:
                why.append(f"{ck.running} running")
            if ck.unread:
                why.append(f"{ck.unread} abandoned, session not all read")
            wanted = self.rule.eval_episodes
            if wanted is not None:  # its sessions do not matter then
                if ck.episodes < wanted:
                    why.append(f"{wanted - ck.episodes} short of --eval-episodes {wanted}")
            else:
                if ck.open_sessions:
                    why.append(f"{ck.open_sessions} session(s) open")
                if ck.unread_sessions:
                    why.append(f"{ck.unread_sessions} session(s) ended, not all read")
            if ck.step is None:
                why.append("no training step")
            waiting.append(f"{ck.name}: {ck.episodes} episodes"
                           + (f" ({', '.join(why)})" if why else ""))
        text = f"{len(self.checkpoints)} checkpoints seen, {written} written"
        text += "; waiting for " + "; ".join(waiting) if waiting else "; waiting for episodes"
        late = self.late()
        if late:
            text += "; late (not in the written point): " + ", ".join(
                f"{n} +{k}" for n, k in sorted(late.items()))
        return text

    def _show(self, text: str) -> None:
        if text != self._status:
            self._status = text
            self.say(text)

    def close(self) -> None:
        for out in self.outputs:
            out.close()


def _fmt(value: Any) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) \
        else f"{float(value):.3g}"


# -- a snapshot of the follower's store --------------------------------------------------------


def snapshot(cursor: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB with the store's episodes and session ends as `store.*`, copied
    through Arrow from a cursor on the follower's own store (the file is open in this
    process; attaching it again is refused). Both are read in one transaction: the same
    consumer checkpoint's state, whatever the sink commits meanwhile."""
    tables = (EPISODES.name, EPISODE_SESSION_ENDS.name)
    cursor.execute("BEGIN TRANSACTION")
    try:
        copies = {t: cursor.sql(f"SELECT * FROM {t}").to_arrow_table() for t in tables}
    finally:
        cursor.execute("ROLLBACK")  # read only
    con = duckdb.connect()
    try:
        con.execute("SET TimeZone = 'UTC'")
        con.execute("ATTACH ':memory:' AS store")
        for table, copy in copies.items():
            con.register("copied", copy)
            con.execute(f"CREATE TABLE store.{table} AS SELECT * FROM copied")
            con.unregister("copied")
    except BaseException:
        con.close()
        raise
    return con


def follow(config: Any, sink_path: Path, follower: Follower, *, group_id: str,
           poll_s: float = 0.5) -> None:
    """Read the episode topics into `sink_path` (this group's own store) and pass the
    follower over it every `poll_s` seconds until SIGTERM or Ctrl-C; then a last pass."""
    from rlmesh_stream.consumers.builders import make_builders
    from rlmesh_stream.consumers.runtime import ConsumerRuntime, RuntimeOptions
    from rlmesh_stream.consumers.sinks import open_sink
    from rlmesh_stream.consumers.sinks.duckdb_sink import DuckDBSink

    sink = open_sink(f"duckdb://{sink_path}")  # SinkError: one line, nothing read
    assert isinstance(sink, DuckDBSink)
    try:
        runtime = ConsumerRuntime(
            config, make_builders(["episodes"]), sink,
            RuntimeOptions(group_id=group_id, from_beginning=True))
        cursor = sink.con.cursor()  # the evaluating thread's own connection to the store
        stop = threading.Event()
        failure: list[BaseException] = []

        def passes() -> None:
            try:
                while True:
                    last = stop.is_set()  # the runtime stopped: one more pass, the last
                    con = snapshot(cursor)
                    try:
                        follower.step(con)
                    finally:
                        con.close()
                    if last:
                        return
                    stop.wait(poll_s)
            except BaseException as exc:  # raised again by the main thread
                failure.append(exc)
                runtime.stop()

        follower.start()
        worker = threading.Thread(target=passes, name="rlmesh-follow", daemon=True)
        worker.start()
        try:
            runtime.run()
        finally:
            stop.set()
            worker.join()
            cursor.close()
        if failure:
            raise failure[0]
    finally:
        follower.close()
        sink.close()

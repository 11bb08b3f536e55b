"""The fault suite's moving parts: live producers, live consumer processes, the verdict.

* `Producers`: real `KafkaRuntimeHooks`, each driven by the fleet simulator at a
  fixed rate in its own thread, so events keep flowing while a fault happens.
* `ConsumerProcess`: a real `rlmesh-stream consume all` process (several may
  share one group and one PostgreSQL sink).
* `verdict`: from the producers' own accounting (`stats()`) and the
  `delivery_producers` table (built from the producers' sequence headers):
  accepted, rows, duplicates, and lost = accepted - counted drops - distinct
  sequences in the table. A counted drop is an event the producer reported as
  failed or dropped (e.g. a full spool); anything else missing is lost.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from rlmesh_stream.producer.delivery import Stats
from rlmesh_stream.producer.hooks import KafkaRuntimeHooks
from rlmesh_stream.producer.manifest import Manifest
from rlmesh_stream.producer.simulator import simulate_fleet
from rlmesh_stream.schemas.connection.config import StreamConfig
from rlmesh_stream.schemas.contract.topics import all_topics

REPO = Path(__file__).parents[2]


def scenario_config(bootstrap: str, registry_url: str) -> StreamConfig:
    """A fresh topic prefix with its event topics at replication factor 3 (min ISR 2)."""
    from rlmesh_stream.infra.topics import ensure_topics

    config = StreamConfig(bootstrap=bootstrap, registry_url=registry_url,
                          topic_prefix=f"f{uuid.uuid4().hex[:8]}.rlmesh.runtime")
    ensure_topics(config, partitions=3, replication_factor=3)
    return config


def fresh_database(server_dsn: str) -> str:
    """A new, empty database on the test server; its DSN."""
    name = f"f_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return f"{server_dsn.rpartition('/')[0]}/{name}"


def query(dsn: str, sql: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return list(conn.execute(sql).fetchall())


@dataclass
class ProducerRun:
    """One producer process's worth of publishing, in a thread."""

    config: StreamConfig
    seed: int
    sessions: int
    rate: float
    settings: dict[str, Any] = field(default_factory=dict)
    hooks: KafkaRuntimeHooks | None = None
    manifest: Manifest | None = None
    stats: Stats | None = None
    seconds: float | None = None  # how long the rollout (all callbacks) took
    error: BaseException | None = None
    thread: threading.Thread | None = None
    # When set, the rollout waits for it after the hook is built (a fault goes in between).
    gate: threading.Event | None = None

    def start(self) -> None:
        self.thread = threading.Thread(target=self._run, name=f"producer-{self.seed}",
                                       daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.hooks = KafkaRuntimeHooks(config=self.config, install_exit_handlers=False,
                                           startup_wait_s=0, **self.settings)
            if self.gate is not None:
                self.gate.wait(120)
            started = time.monotonic()
            self.manifest = simulate_fleet(self.hooks, sessions=self.sessions, episodes=3,
                                           seed=self.seed, rate=self.rate, failure_rate=0.0)
            self.seconds = time.monotonic() - started
            self.stats = self.hooks.close(180)
        except BaseException as exc:  # reported by join(), never swallowed
            self.error = exc

    def join(self, timeout: float) -> None:
        assert self.thread is not None
        self.thread.join(timeout)
        if self.thread.is_alive():
            raise AssertionError(f"producer {self.seed} did not finish within {timeout} s")
        if self.error is not None:
            raise AssertionError(f"producer {self.seed} raised {self.error!r}") from self.error


class ConsumerProcess:
    """`rlmesh-stream consume all` in its own process, logging to a file."""

    def __init__(self, config: StreamConfig, sink: str, group: str, log_dir: Path,
                 name: str) -> None:
        self.log_file = log_dir / f"consumer-{name}.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("RLMESH_STREAM_")}
        env.update(RLMESH_STREAM_BOOTSTRAP=config.bootstrap,
                   RLMESH_STREAM_REGISTRY_URL=config.registry_url,
                   RLMESH_STREAM_TOPIC_PREFIX=config.topic_prefix)
        with open(self.log_file, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "rlmesh_stream.infra.cli", "consume", "all", "--sink", sink,
                 "--group", group, "--from-beginning", "--quiet",
                 "--checkpoint-interval", "0.5"],
                env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM: finish the checkpoint, leave the group; the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise AssertionError(f"consumer did not stop on SIGTERM; see {self.log_file}") from None

    def alive(self) -> bool:
        return self.proc.poll() is None


def group_lag(config: StreamConfig, group: str) -> int | None:
    """Records on the event topics not yet committed by `group` (None if unknown)."""
    progress = group_progress(config, group)
    return None if progress is None else progress[1] - progress[0]


def group_progress(config: StreamConfig, group: str) -> tuple[int, int] | None:
    """(records committed by `group`, records in the event topics), or None if unknown."""
    consumer = Consumer({"bootstrap.servers": config.bootstrap, "group.id": group,
                         "enable.auto.commit": False, "log_level": 0})
    try:
        admin = AdminClient({"bootstrap.servers": config.bootstrap, "log_level": 0})
        md = admin.list_topics(timeout=10)
        tps = [TopicPartition(t, p) for t in all_topics(config.topic_prefix)
               if t in md.topics for p in md.topics[t].partitions]
        committed = consumer.committed(tps, timeout=10)
        done = total = 0
        for tp in committed:
            _, high = consumer.get_watermark_offsets(tp, timeout=10)
            done += min(max(tp.offset, 0), high)
            total += high
        return done, total
    except Exception:
        return None
    finally:
        consumer.close()


def wait_until(what: str, check: Callable[[], bool], timeout: float,
               interval: float = 1.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def sink_lag(config: StreamConfig, sink: str) -> int | None:
    """Records on the event topics the sink's `delivery` builder has not applied yet.

    Measured from the offsets stored in the sink (the source of truth), not from
    Kafka's committed offsets, which the runtime mirrors best-effort only: a commit
    lost while the group coordinator is down is never repeated for a partition that
    receives nothing new.
    """
    from rlmesh_stream.consumers.tables import CONSUMER_OFFSETS

    try:
        stored = {(str(t), int(p)): int(o) for t, p, o in query(
            sink, f"SELECT topic, partition_id, next_offset FROM {CONSUMER_OFFSETS.name} "
                  "WHERE builder = 'delivery'")}
        consumer = Consumer({"bootstrap.servers": config.bootstrap, "group.id": "lag-probe",
                             "log_level": 0})
        try:
            admin = AdminClient({"bootstrap.servers": config.bootstrap, "log_level": 0})
            md = admin.list_topics(timeout=10)
            lag = 0
            for topic in all_topics(config.topic_prefix):
                for p in md.topics[topic].partitions if topic in md.topics else ():
                    _, high = consumer.get_watermark_offsets(TopicPartition(topic, p),
                                                             timeout=10)
                    lag += max(0, high - stored.get((topic, p), 0))
            return lag
        finally:
            consumer.close()
    except Exception:
        return None


def wait_caught_up(config: StreamConfig, sink: str, timeout: float = 180.0) -> None:
    """The sink has applied every record on the event topics, twice in a row."""
    streak = [0]

    def done() -> bool:
        streak[0] = streak[0] + 1 if sink_lag(config, sink) == 0 else 0
        return streak[0] >= 2

    wait_until(f"the sink to apply every record of {config.topic_prefix}", done, timeout)


@dataclass
class Verdict:
    scenario: str
    accepted: int
    counted_drops: int
    rows: int  # records applied to delivery_sequences (copies included)
    duplicates: int
    lost: int
    episodes: int  # rows of the episodes table
    expected_episodes: int

    def row(self) -> str:
        return (f"| {self.scenario} | {self.accepted} | {self.counted_drops} | {self.rows} | "
                f"{self.episodes} / {self.expected_episodes} | {self.duplicates} | "
                f"{self.lost} |")


def verdict(scenario: str, sink: str, runs: list[ProducerRun]) -> Verdict:
    stats = [r.stats for r in runs]
    assert all(s is not None for s in stats), "a producer has no final stats"
    ids = {s.producer_id for s in stats if s is not None}
    rows = [r for r in query(sink, "SELECT producer_id, records, distinct_sequences, "
                                   "duplicates FROM delivery_producers") if r[0] in ids]
    accepted = sum(s.accepted for s in stats if s is not None)
    drops = sum(s.failed_total + s.dropped for s in stats if s is not None)
    distinct = sum(int(r[2]) for r in rows)
    episodes = int(query(sink, "SELECT count(*) FROM episodes")[0][0])
    expected = sum(len(r.manifest.episodes) for r in runs if r.manifest is not None)
    return Verdict(scenario, accepted, drops, sum(int(r[1]) for r in rows),
                   sum(int(r[3]) for r in rows), accepted - drops - distinct, episodes,
                   expected)


HEADER = ("| scenario | events accepted | counted drops | rows in tables "
          "(delivery_sequences) | episodes rows / expected | duplicates | lost |\n"
          "| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n")


@dataclass
class FaultTable:
    """docs/fault-results.md: one row per scenario, rewritten by each run of the suite."""

    rows: dict[str, str] = field(default_factory=dict)
    updated: bool = False

    @classmethod
    def load(cls, path: Path) -> FaultTable:
        table = cls()
        if path.exists():
            for line in path.read_text().splitlines():
                m = re.match(r"^\| ([^|]+?) \| \d", line)
                if m:
                    table.rows[m.group(1)] = line
        return table

    def add(self, v: Verdict) -> None:
        self.rows[v.scenario] = v.row()
        self.updated = True

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            "# Fault suite results\n\n"
            "Written by `pytest -m faults` (tests/faults). Lost = accepted - counted drops - "
            "distinct producer sequences in `delivery_sequences`; duplicates = records whose "
            "(producer id, sequence) was read more than once. Counted drops are events the "
            "producer reported in `stats()` as failed or dropped (never silent).\n\n"
            + HEADER + "\n".join(self.rows[k] for k in sorted(self.rows)) + "\n")

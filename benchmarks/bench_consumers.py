"""Consumer throughput and live latency, side by side in one run (`make bench`).

Over topic sets holding only episode events (episode_started/completed,
session_ended), on the stack named by RLMESH_STREAM_BOOTSTRAP /
RLMESH_STREAM_REGISTRY_URL, one per dataset shape (`--shapes`: sessions x episodes
per session : partitions; by default make bench's old shape, 400 x 150 on 4
partitions, and the targets' two, 3 000 and 15 000 sessions x 20 episodes on the
default 12 partitions: 123 000 and 615 000 events):

  floor     a bare consume loop: read every record, nothing else (what is fetched
            at once, a wait only when nothing is, as the runtime reads)
  builder   the episodes builder: decode + reduce + DuckDB sink (Arrow, one
            transaction per checkpoint with the offsets)
  naive     confluent's AvroDeserializer + one INSERT ... ON CONFLICT per row
            (autocommit), the obvious first consumer

Per shape, whole process first (the targets), then one in-process pair. In-process
throughput counts from the first record read (group join excluded),
with the builder's CPU split into read+decode, reduce (the runtime's thread) and
the sink transaction (the checkpoint writer's thread, overlapping the reading of the
next batch), and the rows upserted per event read (one per episode when an episode's
two events meet in one checkpoint, two when they do not). Whole process
(`--repeats` interleaved runs): a bare consume-loop process vs `rlmesh-stream
consume episodes --from-beginning --until-end` into DuckDB (and into PostgreSQL when
RLMESH_STREAM_BENCH_POSTGRES_DSN names a server), each timed from spawn to exit
(start-up, imports and group join included), wall and CPU (user + sys, all
threads). Then `consume all` over a simulated fleet (`rlmesh-stream simulate`:
every topic, observations included) vs a bare loop over the same topics. Then
live mode: the episodes builder running, `producer.KafkaRuntimeHooks` called at
a steady rate; latency is from the hook call to the commit that makes the row
visible, `--live-rounds` rounds. The last lines set every target beside its figure.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from confluent_kafka import Consumer, Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext
from processes import bare_config, timed, timed_together

from rlmesh_stream.consumers.builders import EpisodesBuilder
from rlmesh_stream.consumers.runtime import (
    CheckpointInfo,
    ConsumerRuntime,
    RuntimeOptions,
)
from rlmesh_stream.consumers.sinks import open_sink
from rlmesh_stream.consumers.tables import EPISODES
from rlmesh_stream.infra.topics import DEFAULT_PARTITIONS, ensure_topics
from rlmesh_stream.producer.config import ProducerSettings
from rlmesh_stream.schemas.codec.serde import EventSerializer
from rlmesh_stream.schemas.connection.config import StreamConfig
from rlmesh_stream.schemas.contract import events as ev
from rlmesh_stream.schemas.contract import headers as h
from rlmesh_stream.schemas.contract.topics import EventType, confluent_serde_conf

TOPICS = (EventType.EPISODE_STARTED, EventType.EPISODE_COMPLETED, EventType.SESSION_ENDED)


def _route(i: int) -> ev.RuntimeEnvContext:
    return ev.RuntimeEnvContext(env_id="bench/CartPole-v1", env_component_id="env-0",
                                model_component_id="model-0", lane=i % 4)


def _episode(session: str, n: int, route: ev.RuntimeEnvContext) -> tuple[Any, Any]:
    rid = f"ep-{n:06d}"
    started = ev.EpisodeStartedEvent(session_id=session, route=route, episode_id=uuid.uuid4().hex,
                                     episode_record_id=rid, episode_index=n, env_index=0,
                                     started_from_auto_reset=False, seed=n, trial_index=n)
    completed = ev.EpisodeCompletedEvent(
        session_id=session, route=route, episode_id=started.episode_id, episode_record_id=rid,
        episode_index=n, env_index=0, step_count=100 + n % 50, cumulative_reward=n * 0.25,
        terminated=True, truncated=False, duration_ms=250, final_info={"is_success": True},
        success=True, seed=n, trial_index=n, predict_ms=0.4, step_ms=0.3)
    return started, completed


def produce_dataset(config: StreamConfig, sessions: int, per_session: int) -> int:
    serializer = EventSerializer(SchemaRegistryClient(config.registry_config()),
                                 topic_prefix=config.topic_prefix)
    # the producer's partitioner (murmur2_random), as `KafkaRuntimeHooks` publishes: with
    # librdkafka's default (CRC32) a session lands elsewhere, and two members of a group
    # on PostgreSQL lock overlapping buckets (builders/base.py's LOCK_BUCKETS)
    producer = Producer({**config.kafka_config(), "linger.ms": 20,
                         "partitioner": ProducerSettings(stream=config).partitioner,
                         "queue.buffering.max.messages": 1_000_000})
    producer_id, seq = uuid.uuid4().hex.encode(), 0

    def send(event: Any) -> None:
        nonlocal seq
        et = EventType.of(event)
        headers = [(h.EVENT_TYPE, et.value.encode()), (h.PRODUCER_ID, producer_id),
                   (h.SEQUENCE, str(seq).encode())]
        seq += 1
        while True:
            try:
                producer.produce(et.topic(config.topic_prefix), key=event.session_id.encode(),
                                 value=serializer.serialize(event), headers=headers)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)

    for s in range(sessions):
        session, route = f"bench-{s:05d}", _route(s)
        for n in range(1, per_session + 1):
            for event in _episode(session, n, route):
                send(event)
        send(ev.SessionEndedEvent(session_id=session, route=route, reason="done",
                                  total_steps=0, total_episodes=per_session))
    producer.flush(120)
    return seq


def _topics(config: StreamConfig) -> list[str]:
    return [et.topic(config.topic_prefix) for et in TOPICS]


def bench_floor(config: StreamConfig, total: int) -> float:
    consumer = Consumer({**bare_config(config), "group.id": uuid.uuid4().hex,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe(_topics(config))
    seen, start = 0, None
    while seen < total:
        for m in _take(consumer):
            if m.error() is None:
                start = start or time.monotonic()
                seen += 1
    elapsed = time.monotonic() - (start or time.monotonic())
    consumer.close()
    return total / elapsed


class _Split:
    """Calling-thread CPU of the runtime's phases, by wrapping its methods (bench only)."""

    PHASES = (("ingest", "read + decode"), ("reduce", "reduce"),
              ("apply", "sink transaction (its own thread, overlapping reading)"),
              ("_stage", "of which staging"), ("_upsert", "upserts"))
    SINK = frozenset({"apply", "_stage", "_upsert"})

    def __init__(self, runtime: ConsumerRuntime) -> None:
        self.cpu = dict.fromkeys((name for name, _ in self.PHASES), 0.0)
        self.rows = self.checkpoints = 0  # rows upserted, in how many transactions
        for name, _ in self.PHASES:
            owner: Any = (runtime.sink if name in self.SINK else
                          runtime.reader if name == "ingest" else runtime.checkpoints)
            setattr(owner, name, self._timed(name, getattr(owner, name)))

    def _timed(self, name: str, method: Any) -> Any:
        def timed(*args: Any, **kwargs: Any) -> Any:
            if name == "apply":
                self.rows += sum(len(rows) for rows in args[0].rows.values())
                self.checkpoints += 1
            start = time.thread_time()
            try:
                return method(*args, **kwargs)
            finally:
                self.cpu[name] += time.thread_time() - start
        return timed

    def text(self, events: int) -> str:
        return ", ".join(f"{label} {1e6 * self.cpu[name] / events:.1f}"
                         for name, label in self.PHASES) + (
            f" us/event (CPU); {self.rows} rows upserted in {self.checkpoints} checkpoints")


def bench_builder(config: StreamConfig, total: int, sink_url: str) -> tuple[float, str]:
    sink = open_sink(sink_url)
    runtime = ConsumerRuntime(config, [EpisodesBuilder()], sink,
                              RuntimeOptions(group_id=uuid.uuid4().hex, from_beginning=True,
                                             until_end=True))
    split = _Split(runtime)
    runtime.run()
    end = time.monotonic()
    rows = sink.query("SELECT count(*) FROM episodes")[0][0]
    sink.close()
    assert runtime.events == total and runtime.first_record_at is not None, runtime.events
    assert rows > 0
    return total / (end - runtime.first_record_at), split.text(total)


def _take(consumer: Consumer) -> list[Any]:
    """What is fetched already, or a wait for some: as the runtime takes records
    (`ConsumerRuntime._consume`). A batch consume with a timeout waits to fill the batch,
    so a bare loop calling only that idled up to 0.5 s at every partial batch, the last
    one included: about half the bare process's wall time over 120 000 records, which
    doubled the ratio `make bench` reported (docs/benchmarks.md)."""
    return consumer.consume(2000, 0) or consumer.consume(2000, 0.5)


BARE_PROCESS = """
import sys, uuid
from confluent_kafka import Consumer
conf, topics, total = eval(sys.argv[1]), sys.argv[2].split(","), int(sys.argv[3])
c = Consumer({**conf, "group.id": uuid.uuid4().hex, "auto.offset.reset": "earliest",
              "enable.auto.commit": False})
c.subscribe(topics)
seen = 0
while seen < total:  # as _take
    seen += sum(1 for m in c.consume(2000, 0) or c.consume(2000, 0.5) if m.error() is None)
c.close()
"""


def bare_process(config: StreamConfig, topics: list[str], total: int) -> tuple[float, float]:
    return timed([sys.executable, "-c", BARE_PROCESS, repr(bare_config(config)),
                           ",".join(topics), str(total)])


def consume_argv(config: StreamConfig, builder: str, sink_url: str, group: str) -> list[str]:
    return [sys.executable, "-m", "rlmesh_stream.infra.cli", "consume", builder,
            "--bootstrap", config.bootstrap, "--registry-url", config.registry_url,
            "--topic-prefix", config.topic_prefix, "--sink", sink_url, "--group", group,
            "--from-beginning", "--until-end", "--quiet"]


def consume_process(config: StreamConfig, builder: str, sink_url: str) -> tuple[float, float]:
    return timed(consume_argv(config, builder, sink_url, uuid.uuid4().hex))


def group_processes(config: StreamConfig, builder: str, sink_url: str,
                    members: int = 2) -> tuple[float, float]:
    """`members` processes of one group started together: the last one's wall seconds
    from spawn to exit, and their CPU seconds summed."""
    walls, cpu = timed_together([consume_argv(config, builder, sink_url, uuid.uuid4().hex)]
                                * members)
    return max(walls), cpu


def bench_processes(config: StreamConfig, topics: list[str], total: int, builder: str,
                    tmp: Path, repeats: int, pg: str | None = None
                    ) -> dict[str, list[tuple[float, float]]]:
    """Bare loop and `consume <builder>` processes (into DuckDB, and into a fresh PostgreSQL
    database of the server `pg` names, by one process and by 2 of one group, their order
    swapped every repeat), interleaved `repeats` times."""
    runs: dict[str, list[tuple[float, float]]] = {"bare": [], "ours": [], "pg": [], "pg2": []}
    for i in range(repeats):
        runs["bare"].append(bare_process(config, topics, total))
        sink = f"duckdb://{tmp / f'{builder}-{config.topic_prefix}-{i}.duckdb'}"
        runs["ours"].append(consume_process(config, builder, sink))
        # one member and two, in either order by turns (the machine's pace drifts)
        for key in (("pg", "pg2") if i % 2 == 0 else ("pg2", "pg")) if pg else ():
            url, drop = _pg_database(pg)
            try:
                runs[key].append(consume_process(config, builder, url) if key == "pg"
                                 else group_processes(config, builder, url))
            finally:
                drop()
        load = os.getloadavg()
        print(f"    repeat {i + 1}: " + ", ".join(f"{k} {v[-1][0]:.1f}s/{v[-1][1]:.1f}s"
                                                for k, v in runs.items() if v)
              + f" (wall/CPU); load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}",
              flush=True)
    return runs


def _process_lines(label: str, runs: dict[str, list[tuple[float, float]]], total: int
                   ) -> dict[str, float]:
    """Prints the medians; returns each consumer's wall-time ratio to the bare process
    (its throughput over the bare loop's)."""
    bare_wall = statistics.median(w for w, _ in runs["bare"])
    bare_cpu = statistics.median(c for _, c in runs["bare"])
    print(f"  {'bare consume loop process':<30}{bare_wall:6.2f} s wall ({total / bare_wall:>9,.0f} "
          f"events/s)  {bare_cpu:6.2f} s CPU   runs {_runs(runs['bare'])}")
    ratios = {}
    for key, name in (("ours", label), ("pg", label.replace("DuckDB", "PostgreSQL"))):
        if not runs.get(key):
            continue
        wall = statistics.median(w for w, _ in runs[key])
        cpu = statistics.median(c for _, c in runs[key])
        ratios[key] = bare_wall / wall
        print(f"  {name:<30}{wall:6.2f} s wall ({total / wall:>9,.0f} events/s)  {cpu:6.2f} s "
              f"CPU   runs {_runs(runs[key])}\n"
              f"      ratio (ours / bare throughput): wall {bare_wall / wall:.2f}x, CPU "
              f"{bare_cpu / cpu:.2f}x (median of {len(runs[key])} interleaved runs)")
    if runs.get("pg2"):
        one = [w for w, _ in runs["pg"]]
        two = [w for w, _ in runs["pg2"]]
        speedup = [o / t for o, t in zip(one, two, strict=True)]
        cpus = [c2 / c1 for (_, c1), (_, c2) in zip(runs["pg"], runs["pg2"], strict=True)]
        ratios["pg2"] = statistics.median(speedup)
        print(f"  {'2 members of one --group':<30}{statistics.median(two):6.2f} s wall, "
              f"{statistics.median(speedup):.2f}x faster than 1 (target 1.5x; rounds "
              f"{' '.join(f'{x:.2f}' for x in speedup)}); CPU {statistics.median(cpus):.2f}x "
              f"one's (target <= 1.2x)")
    return ratios


def _runs(runs: list[tuple[float, float]]) -> str:
    return " ".join(f"{w:.1f}s/{c:.1f}s" for w, c in runs)


def simulate_fleet(config: StreamConfig, sessions: int, episodes: int) -> int:
    """The simulator's fleet (every event type) on the config's prefix; events delivered."""
    out = subprocess.run(
        [sys.executable, "-m", "rlmesh_stream.infra.cli", "simulate", "--bootstrap",
         config.bootstrap, "--registry-url", config.registry_url, "--topic-prefix",
         config.topic_prefix, "--sessions", str(sessions), "--episodes", str(episodes)],
        check=True, capture_output=True, text=True).stdout
    summary = json.loads(out.strip().splitlines()[-1])
    return int(summary["delivered"])


def _pg_database(dsn: str) -> tuple[str, Any]:
    """A throwaway database on the server the URL `dsn` names: (its URL, a drop function)."""
    import psycopg

    name = f"rlmesh_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as con:
        con.execute(f"CREATE DATABASE {name}")

    def drop() -> None:
        with psycopg.connect(dsn, autocommit=True) as con:
            con.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    return urlsplit(dsn)._replace(path=f"/{name}").geturl(), drop


def bench_naive(config: StreamConfig, total: int, path: str) -> float:
    """Over the first `total` records only: at ~100 rows/s the whole set takes minutes."""
    import duckdb

    con = duckdb.connect(path)
    con.execute("CREATE TABLE episodes (session_id TEXT, episode_record_id TEXT, "
                "episode_id TEXT, status TEXT, step_count BIGINT, cumulative_reward DOUBLE, "
                "PRIMARY KEY (session_id, episode_record_id))")
    con.execute("CREATE TABLE session_ends (session_id TEXT PRIMARY KEY, reason TEXT)")
    deserializer = AvroDeserializer(SchemaRegistryClient(config.registry_config()),
                                    conf=confluent_serde_conf())
    consumer = Consumer({**config.kafka_config(), "group.id": uuid.uuid4().hex,
                         "auto.offset.reset": "earliest", "enable.auto.commit": True})
    consumer.subscribe(_topics(config))
    seen, start = 0, None
    while seen < total:
        for m in consumer.consume(500, 0.5):
            if m.error() is not None:
                continue
            start = start or time.monotonic()
            value = deserializer(m.value(), SerializationContext(m.topic(), MessageField.VALUE))
            seen += 1
            if m.topic().endswith("session_ended"):
                con.execute("INSERT INTO session_ends VALUES (?, ?) ON CONFLICT DO NOTHING",
                            [value["session_id"], value["reason"]])
            elif m.topic().endswith("episode_started"):
                con.execute("INSERT INTO episodes (session_id, episode_record_id, episode_id, "
                            "status) VALUES (?, ?, ?, 'running') ON CONFLICT DO NOTHING",
                            [value["session_id"], value["episode_record_id"],
                             value["episode_id"]])
            else:
                con.execute("INSERT INTO episodes VALUES (?, ?, ?, 'completed', ?, ?) "
                            "ON CONFLICT DO UPDATE SET status = 'completed', "
                            "step_count = excluded.step_count, "
                            "cumulative_reward = excluded.cumulative_reward",
                            [value["session_id"], value["episode_record_id"],
                             value["episode_id"], value["step_count"],
                             value["cumulative_reward"]])
    elapsed = time.monotonic() - (start or time.monotonic())
    consumer.close()
    con.close()
    return total / elapsed


def bench_live(config: StreamConfig, sink_url: str, rate: float, seconds: float,
               checkpoint_interval: float) -> list[float]:
    from rlmesh_stream.producer.hooks import KafkaRuntimeHooks

    called: dict[tuple[str, str], float] = {}
    latencies: list[float] = []

    names = EPISODES.column_names
    sid, rid = names.index("session_id"), names.index("episode_record_id")

    def on_checkpoint(info: CheckpointInfo) -> None:
        for r in info.records_by_builder.get("episodes", []):
            if r.event_type is not EventType.EPISODE_COMPLETED:
                continue
            # the packed row the runtime read (see builders/projection.py), or the event
            key = ((r.values[sid], r.values[rid]) if r.values is not None
                   else (r.event.session_id, r.event.episode_record_id))  # type: ignore[union-attr]
            t = called.get(key)
            if t is not None:
                latencies.append(info.committed_at - t)

    sink = open_sink(sink_url)
    runtime = ConsumerRuntime(config, [EpisodesBuilder()], sink,
                              RuntimeOptions(group_id=uuid.uuid4().hex,
                                             checkpoint_interval=checkpoint_interval,
                                             poll_timeout=0.02),
                              on_checkpoint=on_checkpoint)
    thread = threading.Thread(target=runtime.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while len(runtime.assignment) < 4 * len(EpisodesBuilder.event_types):
        if time.monotonic() > deadline:
            raise RuntimeError("the live consumer got no assignment within 60s")
        time.sleep(0.05)
    time.sleep(1.0)
    hooks = KafkaRuntimeHooks(config=config, linger_ms=0)
    route, n, start = _route(0), 0, time.monotonic()
    while time.monotonic() - start < seconds:
        n += 1
        started, completed = _episode("live", n, route)
        hooks.episode_started(started)
        called[("live", completed.episode_record_id)] = time.time()
        hooks.episode_completed(completed)
        time.sleep(max(0.0, start + n / rate - time.monotonic()))
    hooks.close()
    deadline = time.monotonic() + 10
    while len(latencies) < n and time.monotonic() < deadline:
        time.sleep(0.05)
    runtime.stop()
    thread.join(30)
    sink.close()
    return latencies


def _pct(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 \
        else values[0]


# the targets (docs/benchmarks.md)
TARGET_PROCESS = 0.5  # consume episodes -> DuckDB, whole process, over a bare loop process
TARGET_LIVE_P99_MS = 100.0  # hook call -> committed row


def parse_shapes(text: str) -> list[tuple[int, int, int]]:
    """`SESSIONSxEPISODES:PARTITIONS,...` as (sessions, episodes per session, partitions)."""
    shapes = []
    for item in text.split(","):
        size, _, partitions = item.partition(":")
        sessions, _, episodes = size.partition("x")
        shapes.append((int(sessions), int(episodes), int(partitions or DEFAULT_PARTITIONS)))
    return shapes


def bench_shape(base: StreamConfig, shape: tuple[int, int, int], tmp: Path, repeats: int,
                pg: str | None) -> tuple[str, dict[str, float]]:
    """One dataset shape: whole processes (interleaved), then one in-process pair with the
    builder's CPU split and rows upserted. Returns its label and the process ratios."""
    sessions, episodes, partitions = shape
    config = base.with_prefix(f"bench{uuid.uuid4().hex[:8]}.rlmesh.runtime")
    ensure_topics(config, partitions=partitions, replication_factor=1)
    t0 = time.monotonic()
    total = produce_dataset(config, sessions, episodes)
    label = f"{sessions} sessions x {episodes}, {total:,} events, {partitions} partitions"
    load = os.getloadavg()
    print(f"\n== {label} (produced in {time.monotonic() - t0:.1f}s; load average "
          f"{load[0]:.1f} {load[1]:.1f} {load[2]:.1f})", flush=True)
    print("whole process, spawn to exit (start-up and group join included):", flush=True)
    runs = bench_processes(config, _topics(config), total, "episodes", tmp, repeats, pg)
    ratios = _process_lines("consume episodes -> DuckDB", runs, total)
    floor = bench_floor(config, total)
    rate, split = bench_builder(config, total, f"duckdb://{tmp / f'{config.topic_prefix}.duckdb'}")
    print(f"in process, from the first record read: floor {floor:,.0f} events/s, episodes "
          f"builder -> DuckDB {rate:,.0f} ({rate / floor:.2f}x)\n      {split}", flush=True)
    return label, ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="400x150:4,3000x20:12,15000x20:12",
                        help="datasets, SESSIONSxEPISODES:PARTITIONS, comma-separated")
    parser.add_argument("--repeats", type=int, default=3,
                        help="interleaved whole-process runs of each consumer, per shape")
    parser.add_argument("--fleet-sessions", type=int, default=16)
    parser.add_argument("--fleet-episodes", type=int, default=60,
                        help="episodes per simulated session for `consume all`")
    parser.add_argument("--naive-sample", type=int, default=3000,
                        help="records the naive consumer is timed over")
    parser.add_argument("--live-rate", type=float, default=100.0, help="episodes/s")
    parser.add_argument("--live-seconds", type=float, default=5.0)
    parser.add_argument("--live-rounds", type=int, default=3)
    parser.add_argument("--checkpoint-interval", type=float, default=0.1)
    parser.add_argument("--shapes-only", action="store_true",
                        help="the dataset shapes only (no naive, fleet or live runs)")
    args = parser.parse_args()

    base = StreamConfig.from_env()
    load = os.getloadavg()
    print(f"{os.cpu_count()} cores, load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}; "
          f"stack {base.bootstrap}", flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="rlmesh-bench-"))
    pg = (os.environ.get("RLMESH_STREAM_BENCH_POSTGRES_DSN")
          or os.environ.get("RLMESH_STREAM_TEST_POSTGRES_DSN"))
    results = [bench_shape(base, shape, tmp, args.repeats, pg)
               for shape in parse_shapes(args.shapes)]
    if not pg:
        print("PostgreSQL: set RLMESH_STREAM_BENCH_POSTGRES_DSN (a throwaway server)")
    if args.shapes_only:
        for label, ratios in results:
            print(f"{label}: " + ", ".join(f"{k} {v:.2f}x" for k, v in ratios.items()))
        os._exit(0)

    naive_config = base.with_prefix(f"bench{uuid.uuid4().hex[:8]}.rlmesh.runtime")
    ensure_topics(naive_config, partitions=4, replication_factor=1)
    naive_total = produce_dataset(naive_config, 20, 75)
    sample = min(naive_total, args.naive_sample)
    naive = bench_naive(naive_config, sample, str(tmp / "naive.duckdb"))
    floor = bench_floor(naive_config, naive_total)
    print(f"\nnaive: AvroDeserializer + INSERT per row, over the first {sample} records: "
          f"{naive:,.0f} events/s ({naive / floor:.4f}x the bare loop)", flush=True)

    fleet = base.with_prefix(f"bench{uuid.uuid4().hex[:8]}.rlmesh.runtime-fleet")
    t0 = time.monotonic()
    fleet_total = simulate_fleet(fleet, args.fleet_sessions, args.fleet_episodes)
    fleet_topics = [et.topic(fleet.topic_prefix) for et in EventType]
    print(f"consume all over the simulator's fleet: {fleet_total} events, every topic "
          f"({args.fleet_sessions} sessions x {args.fleet_episodes} episodes, simulated in "
          f"{time.monotonic() - t0:.1f}s), whole process:", flush=True)
    fleet_runs = bench_processes(fleet, fleet_topics, fleet_total, "all", tmp, args.repeats)
    fleet_ratio = _process_lines("consume all -> DuckDB", fleet_runs, fleet_total)["ours"]

    p99s = []
    for _ in range(args.live_rounds):
        live = base.with_prefix(f"bench{uuid.uuid4().hex[:8]}.rlmesh.runtime-live")
        ensure_topics(live, partitions=4, replication_factor=1)
        latencies = bench_live(live, f"duckdb://{tmp / f'{live.topic_prefix}.duckdb'}",
                               args.live_rate, args.live_seconds, args.checkpoint_interval)
        ms = sorted(x * 1000 for x in latencies)
        p99s.append(_pct(ms, 99))
        print(f"live latency, hook call -> row committed ({len(ms)} episodes at "
              f"{args.live_rate:.0f}/s, checkpoint interval {args.checkpoint_interval * 1000:.0f}"
              f" ms): p50 {_pct(ms, 50):.0f} ms, p99 {_pct(ms, 99):.0f} ms", flush=True)

    load = os.getloadavg()
    print(f"\ntargets, load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}:")
    for label, ratios in results:
        _target(f"consume episodes -> DuckDB, whole process ({label})", ratios["ours"],
                f">= {TARGET_PROCESS}x", ratios["ours"] >= TARGET_PROCESS)
        if "pg" in ratios:
            _target("  the same -> PostgreSQL", ratios["pg"], "reported", None)
        if "pg2" in ratios:
            _target("  2 members of one --group -> PostgreSQL, vs 1", ratios["pg2"], ">= 1.5x",
                    ratios["pg2"] >= 1.5)
    _target("consume all -> DuckDB over the simulated fleet, whole process", fleet_ratio,
            "reported", None)
    p99 = statistics.median(p99s)
    print(f"  {'live latency p99, hook call -> committed row (median of rounds)':<92}"
          f"{p99:6.0f} ms  < {TARGET_LIVE_P99_MS:.0f} ms  "
          f"{'met' if p99 < TARGET_LIVE_P99_MS else 'NOT MET'}")
    os._exit(0)  # librdkafka threads of the stopped runtime must not delay the exit


def _target(what: str, ratio: float, target: str, met: bool | None) -> None:
    verdict = "" if met is None else ("met" if met else "NOT MET")
    print(f"  {what:<92}{ratio:6.2f}x  {target:<9} {verdict}")


if __name__ == "__main__":
    main()

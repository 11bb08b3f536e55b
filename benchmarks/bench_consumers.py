"""Consumer throughput and live latency, side by side in one run (`make bench`).

Over one topic set holding only episode events (episode_started/completed,
session_ended), on the stack named by RLMESH_STREAM_BOOTSTRAP /
RLMESH_STREAM_REGISTRY_URL:

  floor     a bare consume loop: read every record, nothing else
  builder   the episodes builder: decode + reduce + DuckDB sink (Arrow, one
            transaction per checkpoint with the offsets)
  naive     confluent's AvroDeserializer + one INSERT ... ON CONFLICT per row
            (autocommit), the obvious first consumer

Throughput counts from the first record read (group join excluded). Then live
mode: the episodes builder running, `producer.KafkaRuntimeHooks` called at a
steady rate; latency is from the hook call to the commit that makes the row
visible (the checkpoint interval is the main term).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from rlmesh_stream.consumers.builders import EpisodesBuilder
from rlmesh_stream.consumers.runtime import CheckpointInfo, ConsumerRuntime, RuntimeOptions
from rlmesh_stream.consumers.sinks import open_sink
from rlmesh_stream.infra.topics import ensure_topics
from rlmesh_stream.schemas import events as ev
from rlmesh_stream.schemas import headers as h
from rlmesh_stream.schemas.config import StreamConfig
from rlmesh_stream.schemas.serde import EventSerializer
from rlmesh_stream.schemas.topics import EventType, confluent_serde_conf

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
    producer = Producer({**config.kafka_config(), "linger.ms": 20,
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
    consumer = Consumer({**config.kafka_config(), "group.id": uuid.uuid4().hex,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe(_topics(config))
    seen, start = 0, None
    while seen < total:
        for m in consumer.consume(2000, 0.5):
            if m.error() is None:
                start = start or time.monotonic()
                seen += 1
    elapsed = time.monotonic() - (start or time.monotonic())
    consumer.close()
    return total / elapsed


def bench_builder(config: StreamConfig, total: int, sink_url: str) -> float:
    sink = open_sink(sink_url)
    runtime = ConsumerRuntime(config, [EpisodesBuilder()], sink,
                              RuntimeOptions(group_id=uuid.uuid4().hex, from_beginning=True,
                                             until_end=True))
    runtime.run()
    end = time.monotonic()
    rows = sink.query("SELECT count(*) FROM episodes")[0][0]
    sink.close()
    assert runtime.events == total and runtime.first_record_at is not None, runtime.events
    assert rows > 0
    return total / (end - runtime.first_record_at)


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

    def on_checkpoint(info: CheckpointInfo) -> None:
        for r in info.records_by_builder.get("episodes", []):
            e = r.event
            t = called.get((e.session_id, getattr(e, "episode_record_id", "")))
            if t is not None and isinstance(e, ev.EpisodeCompletedEvent):
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


def _pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 \
        else values[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--episodes-per-session", type=int, default=150)
    parser.add_argument("--naive-sample", type=int, default=3000,
                        help="records the naive consumer is timed over")
    parser.add_argument("--live-rate", type=float, default=100.0, help="episodes/s")
    parser.add_argument("--live-seconds", type=float, default=8.0)
    parser.add_argument("--checkpoint-interval", type=float, default=0.1)
    args = parser.parse_args()

    base = StreamConfig.from_env()
    config = base.with_prefix(f"bench{uuid.uuid4().hex[:8]}.rlmesh.runtime")
    ensure_topics(config, partitions=4, replication_factor=1)
    t0 = time.monotonic()
    total = produce_dataset(config, args.sessions, args.episodes_per_session)
    print(f"dataset: {total} episode events ({args.sessions} sessions) on {config.bootstrap}, "
          f"produced in {time.monotonic() - t0:.1f}s; {os.cpu_count()} cores")
    tmp = Path(tempfile.mkdtemp(prefix="rlmesh-bench-"))
    floor = bench_floor(config, total)
    builder = bench_builder(config, total, f"duckdb://{tmp / 'builder.duckdb'}")
    naive = bench_naive(config, min(total, args.naive_sample), str(tmp / "naive.duckdb"))
    print(f"{'consumer':<44}{'events/s':>12}{'vs floor':>10}")
    for name, rate in [("bare consume loop (floor)", floor),
                       ("episodes builder -> DuckDB (decode + sink)", builder),
                       ("naive: AvroDeserializer + INSERT per row*", naive)]:
        print(f"{name:<44}{rate:>12,.0f}{rate / floor:>10.2f}")
    print(f"* timed over the first {min(total, args.naive_sample)} records")
    pg = os.environ.get("RLMESH_STREAM_BENCH_POSTGRES_DSN")
    if pg:
        rate = bench_builder(config, total, pg)
        print(f"{'episodes builder -> PostgreSQL':<44}{rate:>12,.0f}{rate / floor:>10.2f}")
    live = config.with_prefix(config.topic_prefix + "-live")
    ensure_topics(live, partitions=4, replication_factor=1)
    latencies = bench_live(live, f"duckdb://{tmp / 'live.duckdb'}", args.live_rate,
                           args.live_seconds, args.checkpoint_interval)
    ms = sorted(x * 1000 for x in latencies)
    print(f"live latency, hook call -> row committed ({len(ms)} episodes at "
          f"{args.live_rate:.0f}/s, checkpoint every {args.checkpoint_interval * 1000:.0f} ms): "
          f"p50 {_pct(ms, 50):.0f} ms, p99 {_pct(ms, 99):.0f} ms", flush=True)
    os._exit(0)  # librdkafka threads of the stopped runtime must not delay the exit


if __name__ == "__main__":
    main()

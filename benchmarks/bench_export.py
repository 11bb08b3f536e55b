"""`export trajectories` throughput and size, side by side in one run (`make bench`).

A simulated fleet (3-lane vector sessions, NEXT_STEP autoreset, so every
episode is exportable) is published once to the stack named by
RLMESH_STREAM_BOOTSTRAP / RLMESH_STREAM_REGISTRY_URL, then read three ways
over the same topics (every event topic: the export reads them all for its
certificate):

  floor     a bare consume loop: read every record, nothing else
  parquet   `export trajectories --format parquet` (decode, join, write, commit)
  minari    `export trajectories --format minari`

Throughput is in lane steps per second from the first record read (group join
excluded); bytes per lane step compare the dataset on disk with the record
values of the trajectory topics.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer

from rlmesh_stream.consumers.datasets.episodes import Filters
from rlmesh_stream.consumers.datasets.export import (
    TRAJECTORY_EVENTS,
    ExportOptions,
    run_export,
)
from rlmesh_stream.consumers.runtime import RuntimeOptions
from rlmesh_stream.infra.topics import ensure_topics
from rlmesh_stream.producer.hooks import KafkaRuntimeHooks
from rlmesh_stream.producer.simulator import simulate_fleet
from rlmesh_stream.schemas.connection.config import StreamConfig
from rlmesh_stream.schemas.contract.topics import EventType


def floor(config: StreamConfig, total: int) -> tuple[float, dict[str, int]]:
    """Seconds a bare loop takes to read `total` records; value bytes per topic."""
    consumer = Consumer({**config.kafka_config(), "group.id": uuid.uuid4().hex,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe(sorted(et.topic(config.topic_prefix) for et in EventType))
    seen, start, sizes = 0, None, dict[str, int]()
    while seen < total:
        for m in consumer.consume(2000, 0.5):
            if m.error() is None:
                start = start or time.monotonic()
                seen += 1
                topic = m.topic() or ""
                sizes[topic] = sizes.get(topic, 0) + len(m.value() or b"")
    elapsed = time.monotonic() - (start or time.monotonic())
    consumer.close()
    return elapsed, sizes


def export(config: StreamConfig, out: Path, fmt: str) -> float:
    options = ExportOptions(out, fmt, "bench/fleet-v0", Filters())
    started = time.monotonic()
    _, runtime = run_export(config, options, RuntimeOptions(
        group_id=uuid.uuid4().hex, from_beginning=True, until_end=True))
    return time.monotonic() - (runtime.first_record_at or started)


def dataset_bytes(out: Path) -> int:
    return sum(p.stat().st_size for p in out.rglob("*")
               if p.is_file() and ".rlmesh-export" not in p.parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=30)
    parser.add_argument("--episodes", type=int, default=20, help="per session")
    args = parser.parse_args()
    config = StreamConfig.from_env(
        env=os.environ, topic_prefix=f"bench{uuid.uuid4().hex[:8]}.rlmesh.runtime")
    ensure_topics(config, partitions=3)
    hooks = KafkaRuntimeHooks(config=config, install_exit_handlers=False)
    manifest = simulate_fleet(hooks, sessions=args.sessions, lanes=3, episodes=args.episodes,
                              seed=1, failure_rate=0.0, next_step_fraction=1.0)
    hooks.close()
    steps = sum(s.total_steps for s in manifest.sessions)
    print(f"fleet: {manifest.total_events} events, {steps} lane steps, "
          f"{len(manifest.episodes)} episodes")
    floor_s, sizes = floor(config, manifest.total_events)
    topic_bytes = sum(n for t, n in sizes.items()
                      if t in {et.topic(config.topic_prefix) for et in TRAJECTORY_EVENTS})
    rows = [("floor (bare consume loop)", floor_s, topic_bytes)]
    with tempfile.TemporaryDirectory() as tmp:
        for fmt in ("parquet", "minari"):
            out = Path(tmp) / fmt
            rows.append((f"export --format {fmt}", export(config, out, fmt), dataset_bytes(out)))
    print(f"{'':28} {'lane steps/s':>13} {'vs floor':>9} {'bytes/step':>11}")
    for name, seconds, size in rows:
        print(f"{name:28} {steps / seconds:13,.0f} {floor_s / seconds:8.2f}x "
              f"{size / steps:11.1f}")
    print("(bytes/step: the floor row is the trajectory topics' record values)")


if __name__ == "__main__":
    main()

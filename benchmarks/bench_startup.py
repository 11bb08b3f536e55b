"""Start-up: what a consumer costs before its first record, side by side in one run.

  bare     a Python process that imports confluent_kafka, subscribes a new group to the
           episodes builder's topics (all empty), asks each assigned partition's
           watermarks, finds nothing to read and exits: the floor of any consumer
  consume  `rlmesh-stream consume episodes --until-end` over the same empty topics
           (DuckDB sink, a new group each run)
  --help   `rlmesh-stream --help`, whose target is absolute (under 0.25 s)

Each is a whole process timed from spawn to exit, `--rounds` interleaved rounds after one
warm-up of each (the warm-up compiles the byte code, as `pip install` does for users:
PYTHONDONTWRITEBYTECODE is dropped from the children's environment). Needs the stack:
RLMESH_STREAM_BOOTSTRAP / RLMESH_STREAM_REGISTRY_URL (defaults: the dev stack's ports).
Run: `make bench` or `.venv/bin/python benchmarks/bench_startup.py`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka.admin import AdminClient

from rlmesh_stream.infra.topics import ensure_topics
from rlmesh_stream.schemas.connection.config import StreamConfig
from rlmesh_stream.schemas.contract.topics import EventType, all_topics, topic_name

# the episodes builder's topics
TOPICS = (EventType.EPISODE_STARTED, EventType.EPISODE_COMPLETED, EventType.SESSION_ENDED)

BARE = """
import sys, uuid
from confluent_kafka import Consumer
conf, topics = eval(sys.argv[1]), sys.argv[2].split(",")
c = Consumer({**conf, "group.id": uuid.uuid4().hex, "auto.offset.reset": "earliest",
              "enable.auto.commit": False})
assigned = []
c.subscribe(topics, on_assign=lambda _c, parts: assigned.extend(parts))
while not assigned:
    c.poll(0.05)
ends = [c.get_watermark_offsets(p, timeout=10) for p in assigned]
assert all(high == low for low, high in ends), ends  # empty: nothing to read
c.close()
"""


def delete_topics(config: StreamConfig) -> None:
    admin = AdminClient(config.kafka_config())
    for future in admin.delete_topics(all_topics(config.topic_prefix)).values():
        future.result()


def _wall(argv: list[str], env: dict[str, str]) -> float:
    start = time.monotonic()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL,
                   env=env)
    return time.monotonic() - start


def commands(config: StreamConfig, sink: Path) -> dict[str, list[str]]:
    topics = ",".join(topic_name(config.topic_prefix, t) for t in TOPICS)
    cli = [sys.executable, "-m", "rlmesh_stream.infra.cli"]
    return {
        "bare": [sys.executable, "-c", BARE, repr(config.kafka_config()), topics],
        "consume": [*cli, "consume", "episodes", "--bootstrap", config.bootstrap,
                    "--registry-url", config.registry_url, "--topic-prefix",
                    config.topic_prefix, "--sink", f"duckdb://{sink}", "--until-end",
                    "--quiet", "--group", "GROUP"],
        "help": [*cli, "--help"],
    }


def run(argv: list[str], env: dict[str, str]) -> float:
    return _wall([uuid.uuid4().hex if a == "GROUP" else a for a in argv], env)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    config = StreamConfig.from_env().with_prefix(f"bench{uuid.uuid4().hex[:8]}.rlmesh.runtime")
    ensure_topics(config, partitions=4, replication_factor=1)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    load = os.getloadavg()
    print(f"start-up over empty topics (4 partitions) on {config.bootstrap}; "
          f"{os.cpu_count()} cores, load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    try:
        with tempfile.TemporaryDirectory(prefix="rlmesh-bench-") as tmp:
            argvs = commands(config, Path(tmp) / "startup.duckdb")
            for argv in argvs.values():  # warm-up: byte code compiled, the sink created
                run(argv, env)
            walls: dict[str, list[float]] = {name: [] for name in argvs}
            for _ in range(args.rounds):
                for name, argv in argvs.items():
                    walls[name].append(run(argv, env))
    finally:
        delete_topics(config)
    median = {name: statistics.median(w) for name, w in walls.items()}
    for name, values in walls.items():
        runs = " ".join(f"{w:.2f}" for w in sorted(values))
        print(f"  {name:8} median {median[name]:5.3f} s   runs {runs}")
    ratio = median["consume"] / median["bare"]
    print(f"  consume episodes --until-end / bare: {ratio:.2f}x (target <= 2x: "
          f"{'met' if ratio <= 2 else 'MISSED'}); --help {median['help']:.3f} s (target < "
          f"0.25 s: {'met' if median['help'] < 0.25 else 'MISSED'}); median of {args.rounds} "
          "interleaved rounds")


if __name__ == "__main__":
    main()

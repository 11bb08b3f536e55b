"""`export trajectories` throughput and size, side by side in one run (`make bench`).

Per fleet shape (`--shapes`: by default 90 sessions x 40 episodes of 3 lanes and 2 750 x
18 of 16 lanes, 12 partitions each; vector sessions, NEXT_STEP autoreset, so every episode
is exportable) a simulated fleet is published once to the stack named by
RLMESH_STREAM_BOOTSTRAP / RLMESH_STREAM_REGISTRY_URL. Then, in `--rounds` interleaved
rounds, processes timed from spawn to exit (imports and group join included), wall and
CPU (user + sys, every thread):

  bare      a bare consume-loop process over the same topics (every event topic:
            the export reads them all for its certificate) and partitions, reading
            each partition to the end offset it saw at start
  parquet   `export trajectories --format parquet --from-beginning --until-end`
  minari    `export trajectories --format minari ...`, and beside it h5py alone
            writing the same episode groups (read back into memory first)
  iceberg   `export trajectories --format iceberg ...` (an SQLite catalog)
  2 members two iceberg exporters in one group (half of the partitions each), against
            two bare loops over the same halves and against one iceberg exporter,
            started together

Printed: lane steps/s per process and the ratio to the bare loop, the 2 members'
wall time against one member's (target >= 1.6x faster) and their CPU per lane step
against one member's (target <= 1.2x), and bytes per lane step on disk against the
trajectory topics' record values. Medians of the rounds; each round's ratios are
printed beside them, and the load average with every figure (the machine is shared).
`--formats` leaves formats out (the 2-member pair is iceberg's).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from processes import bare_config, timed, timed_together
from topics import delete_topics

from rlmesh_stream.consumers.datasets.export import TRAJECTORY_EVENTS
from rlmesh_stream.infra.topics import ensure_topics
from rlmesh_stream.producer.hooks import KafkaRuntimeHooks
from rlmesh_stream.producer.simulator import simulate_fleet
from rlmesh_stream.schemas.connection.config import StreamConfig
from rlmesh_stream.schemas.contract.topics import EventType

PARTITIONS = 4  # --partitions

# A bare loop over `partitions` of `topics`: assigned (no group wait), read to the end
# offsets seen at start, as `--until-end` does, with the runtime's fetch settings.
BARE_PROCESS = """
import sys, uuid
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
conf, topics, parts = eval(sys.argv[1]), sys.argv[2].split(","), eval(sys.argv[3])
c = Consumer({**conf, "group.id": uuid.uuid4().hex, "enable.auto.commit": False})
ends = {}
for t in topics:
    for p in parts:
        low, high = c.get_watermark_offsets(TopicPartition(t, p), timeout=15)
        if high > low:
            ends[(t, p)] = high
c.assign([TopicPartition(t, p, 0) for t, p in ends])
left = dict(ends)
while left:  # what is fetched already, or a wait for some (as the runtime takes records)
    for m in c.consume(2000, 0) or c.consume(2000, 0.5):
        if m.error() is None and m.offset() + 1 >= left.get((m.topic(), m.partition()), 1 << 62):
            del left[(m.topic(), m.partition())]
c.close()
"""


# h5py's own cost of what a Minari export stores: every episode group of `main_data.hdf5`
# (its datasets, sub-groups and attributes) read into memory, then written again into a new
# file with h5py alone, the writing timed; prints the seconds and the episode count.
H5PY_PROCESS = """
import sys, time, h5py
def load(group):
    return ({k: dict(v.attrs) for k, v in [("", group)]}[""],
            {k: (load(v) if isinstance(v, h5py.Group) else v[()]) for k, v in group.items()})
with h5py.File(sys.argv[1], "r") as f:
    episodes = {k: load(v) for k, v in f.items()}
def store(group, loaded):
    attrs, items = loaded
    for k, v in attrs.items():
        group.attrs[k] = v
    for k, v in items.items():
        if isinstance(v, tuple):
            store(group.create_group(k), v)
        else:
            group.create_dataset(k, data=v)
start = time.perf_counter()
with h5py.File(sys.argv[2], "w") as f:
    for k, v in episodes.items():
        store(f.create_group(k), v)
print(time.perf_counter() - start, len(episodes))
"""


def h5py_alone(out: Path) -> tuple[float, int]:
    """h5py's own seconds writing the episode groups a Minari export wrote into `out`."""
    source = next(out.rglob("main_data.hdf5"))
    result = subprocess.run([sys.executable, "-c", H5PY_PROCESS, str(source),
                             str(out / "h5py-alone.hdf5")],
                            check=True, capture_output=True, text=True).stdout.split()
    return float(result[0]), int(result[1])


def load_text() -> str:
    load = os.getloadavg()
    return f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}"


def bare_argv(config: StreamConfig, partitions: list[int]) -> list[str]:
    topics = ",".join(sorted(et.topic(config.topic_prefix) for et in EventType))
    return [sys.executable, "-c", BARE_PROCESS, repr(bare_config(config)), topics,
            repr(partitions)]


def export_argv(config: StreamConfig, fmt: str, where: list[str], group: str) -> list[str]:
    return [sys.executable, "-m", "rlmesh_stream.infra.cli", "export", "trajectories",
            "--bootstrap", config.bootstrap, "--registry-url", config.registry_url,
            "--topic-prefix", config.topic_prefix, "--format", fmt, *where,
            "--dataset-id", "bench/fleet-v0", "--group", group, "--from-beginning",
            "--until-end", "--quiet"]


def iceberg_where(tmp: Path, name: str) -> list[str]:
    return ["--catalog", f"sqlite:///{tmp / 'catalog.db'}", "--table", f"bench.{name}"]


def value_bytes(config: StreamConfig) -> int:
    """The trajectory topics' record values, in bytes."""
    topics = [et.topic(config.topic_prefix) for et in TRAJECTORY_EVENTS]
    consumer = Consumer({**config.kafka_config(), "group.id": uuid.uuid4().hex,
                         "enable.auto.commit": False})
    ends = {}
    for t in topics:
        for p in range(PARTITIONS):
            low, high = consumer.get_watermark_offsets(TopicPartition(t, p), timeout=15)
            if high > low:
                ends[(t, p)] = high
    consumer.assign([TopicPartition(t, p, 0) for t, p in ends])
    total = 0
    while ends:
        for m in consumer.consume(2000, 0.5):
            if m.error() is None:
                total += len(m.value() or b"")
                key = (m.topic() or "", m.partition() or 0)
                if (m.offset() or 0) + 1 >= ends.get(key, 1 << 62):
                    del ends[key]
    consumer.close()
    return total


def dataset_bytes(out: Path) -> int:
    return sum(p.stat().st_size for p in out.rglob("*")
               if p.is_file() and ".rlmesh-export" not in p.parts)


# the two fleet shapes: SESSIONSxEPISODESxLANES:PARTITIONS
SHAPES = "90x40x3:12,2750x18x16:12"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default=SHAPES,
                        help="fleets, comma-separated: SESSIONSxEPISODESxLANES:PARTITIONS")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds")
    parser.add_argument("--formats", default="parquet,minari,iceberg",
                        help="the formats timed, comma-separated")
    args = parser.parse_args()
    for shape in args.shapes.split(","):
        fleet, _, partitions = shape.partition(":")
        sessions, episodes, lanes = (int(n) for n in fleet.split("x"))
        global PARTITIONS
        PARTITIONS = int(partitions or 4)
        config = StreamConfig.from_env(
            env=os.environ, topic_prefix=f"bench{uuid.uuid4().hex[:8]}.rlmesh.runtime")
        ensure_topics(config, partitions=PARTITIONS)
        try:
            run(config, sessions, episodes, lanes, args)
        finally:
            delete_topics(config)


def run(config: StreamConfig, sessions: int, episodes: int, lanes: int,
        args: argparse.Namespace) -> None:
    # spooled, not dropped, when the queue is full: on a loaded machine the hook dropped
    # half of a 100 000-event fleet, and the lane steps counted were never published
    spool = Path(tempfile.mkdtemp(prefix="rlmesh-bench-spool-"))
    hooks = KafkaRuntimeHooks(config=config, install_exit_handlers=False, overflow="spool",
                              spool_dir=spool)
    t0 = time.monotonic()
    manifest = simulate_fleet(hooks, sessions=sessions, lanes=lanes, episodes=episodes,
                              seed=1, failure_rate=0.0, next_step_fraction=1.0)
    stats = hooks.close(300)
    shutil.rmtree(spool, ignore_errors=True)
    if stats.delivered != stats.accepted or stats.accepted != manifest.total_events:
        raise SystemExit(f"the fleet was not published whole: {stats}")
    steps = sum(s.total_steps for s in manifest.sessions)
    print(f"fleet: {sessions} sessions x {episodes} episodes, {lanes} lanes: "
          f"{manifest.total_events} events, {steps} lane steps, "
          f"{len(manifest.episodes)} episodes, {PARTITIONS} partitions, published in "
          f"{time.monotonic() - t0:.1f}s; {os.cpu_count()} cores, {load_text()}; "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
          flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="rlmesh-bench-export-"))
    try:
        measure(config, steps, tmp, args.rounds, args.formats.split(","),
                TARGETS_WIDE if lanes >= 16 else TARGETS)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# the export against the bare loop: a 3-lane fleet, and a 16-lane one (more lane steps a record)
TARGETS = {"parquet": 0.5, "iceberg": 0.4}
TARGETS_WIDE = {"parquet": 0.3, "iceberg": 0.25}


def measure(config: StreamConfig, steps: int, tmp: Path, rounds: int,
            formats: list[str], targets: dict[str, float]) -> None:
    names = ("bare", *(f for f in ("parquet", "minari", "iceberg") if f in formats))
    runs: dict[str, list[tuple[float, float]]] = {n: [] for n in names}
    pair: dict[str, list[tuple[float, float]]] = {"bare": [], "members": []}
    sizes: dict[str, int] = {}
    h5py_runs: list[tuple[float, int]] = []  # h5py alone writing the minari export's groups
    halves = [list(range(PARTITIONS // 2)), list(range(PARTITIONS // 2, PARTITIONS))]
    for r in range(rounds):
        runs["bare"].append(timed(bare_argv(config, list(range(PARTITIONS)))))
        for fmt in (f for f in ("parquet", "minari") if f in formats):
            out = tmp / f"{fmt}-{r}"
            runs[fmt].append(timed(export_argv(config, fmt, ["--out", str(out)],
                                               uuid.uuid4().hex)))
            sizes[fmt] = dataset_bytes(out)
            if fmt == "minari":
                h5py_runs.append(h5py_alone(out))
        if "iceberg" in formats:
            runs["iceberg"].append(timed(export_argv(config, "iceberg",
                                                     iceberg_where(tmp, f"one{r}"),
                                                     uuid.uuid4().hex)))
            walls, cpu = timed_together([bare_argv(config, h) for h in halves])
            pair["bare"].append((max(walls), cpu))
            group = uuid.uuid4().hex
            walls, cpu = timed_together([export_argv(config, "iceberg",
                                                     iceberg_where(tmp, f"two{r}"), group)] * 2)
            pair["members"].append((max(walls), cpu))
        print(f"  round {r + 1}: " + ", ".join(
            f"{n} {runs[n][-1][0]:.1f}s/{runs[n][-1][1]:.1f}s" for n in names)
              + "".join(f", 2 {k} {v[-1][0]:.1f}s/{v[-1][1]:.1f}s" for k, v in pair.items()
                        if v)
              + f" (wall/CPU); {load_text()}", flush=True)
    if "iceberg" in formats:
        sizes["iceberg"] = sum(p.stat().st_size for p in (tmp / "warehouse").rglob("*")
                               if p.is_file() and "/one0_" in str(p))
    floor_bytes = value_bytes(config)
    report(steps, runs, pair, sizes, floor_bytes, rounds, targets)
    if h5py_runs:
        alone = statistics.median(t for t, _ in h5py_runs)
        minari = statistics.median(w for w, _ in runs["minari"])
        print(f"  h5py alone writing the minari export's {h5py_runs[0][1]} episode groups "
              f"(datasets, sub-groups, attributes; data in memory): {alone:.2f} s, "
              f"{alone / minari:.0%} of the minari export's wall")
    print(f"at the end: {load_text()}")


def report(steps: int, runs: dict[str, list[tuple[float, float]]],
           pair: dict[str, list[tuple[float, float]]], sizes: dict[str, int],
           floor_bytes: int, rounds: int, targets: dict[str, float]) -> None:
    def med(values: list[float]) -> float:
        return statistics.median(values)

    bare = [w for w, _ in runs["bare"]]
    print(f"whole process, spawn to exit, median of {rounds} interleaved rounds:")
    print(f"  {'':34}{'wall s':>7}{'CPU s':>7}{'lane steps/s':>13}{'vs bare':>9}"
          f"{'target':>8}  {'per round':<18}{'bytes/step':>11}")
    for name, label in (("bare", "bare consume loop (floor)"),
                        ("parquet", "export --format parquet"),
                        ("minari", "export --format minari"),
                        ("iceberg", "export --format iceberg")):
        if name not in runs:
            continue
        wall, cpu = med([w for w, _ in runs[name]]), med([c for _, c in runs[name]])
        per_round = [b / w for b, (w, _) in zip(bare, runs[name], strict=True)]
        size = floor_bytes if name == "bare" else sizes[name]
        target = f"{targets[name]:g}x" if name in targets else ""
        print(f"  {label:34}{wall:7.2f}{cpu:7.2f}{steps / wall:13,.0f}"
              f"{med(per_round):8.2f}x{target:>8}  "
              f"{' '.join(f'{x:.2f}' for x in per_round):<18}{size / steps:11.1f}")
    if not pair["members"]:
        return
    bare2 = [w for w, _ in pair["bare"]]
    members = [w for w, _ in pair["members"]]
    alone = [w for w, _ in runs["iceberg"]]
    speedup = [a / m for a, m in zip(alone, members, strict=True)]
    print(f"  2 iceberg members in one group vs 1 member: {med(members):.2f} s vs "
          f"{med(alone):.2f} s wall, {med(speedup):.2f}x faster (target 1.6x; rounds "
          f"{' '.join(f'{x:.2f}' for x in speedup)})")
    per_round = [b / m for b, m in zip(bare2, members, strict=True)]
    print(f"  2 iceberg members in one group vs 2 bare loops over the same halves: "
          f"{med(members):.2f} s vs {med(bare2):.2f} s wall, {med(per_round):.2f}x "
          f"(target 0.5x; rounds {' '.join(f'{x:.2f}' for x in per_round)})")
    one = [c for _, c in runs["iceberg"]]
    two = [c for _, c in pair["members"]]
    cpu_ratio = [t / o for o, t in zip(one, two, strict=True)]
    print(f"  CPU per lane step: 2 members {1e6 * med(two) / steps:.1f} us, 1 member "
          f"{1e6 * med(one) / steps:.1f} us: {med(cpu_ratio):.2f}x (target <= 1.2x; rounds "
          f"{' '.join(f'{x:.2f}' for x in cpu_ratio)})")
    print("  (bytes/step: the floor row is the trajectory topics' record values; iceberg: "
          "both tables of the first round)")


if __name__ == "__main__":
    main()

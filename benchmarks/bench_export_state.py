"""Bytes an export writes for its committed state at each commit, with 1 000 producers.

A simulated fleet is published in `--waves` waves of `--sessions` sessions, one after
another (a long live run: producers come, run their sessions, and go), to the stack
named by RLMESH_STREAM_BOOTSTRAP / RLMESH_STREAM_REGISTRY_URL. It is then copied into
another topic prefix with each session's records stamped with a producer id of their own
(one producer per session: waves x sessions ids, 1 000 by default) and sequences counted
per producer, as that many producer processes would have published them.
`export trajectories --format parquet --from-beginning --until-end` runs over the copy
in this process, `--max-batch` records per commit (a live run's checkpoint a second at
that many records a second), and every `ManifestStore.commit` is measured: the bytes it
passed to write() (the thread's `wchar`, /proc/thread-self/io: the state, the journal,
the manifest, nothing of the data files, which are written before it) and its wall time
(the JSON it writes and the fsyncs; the sink gathers the state's values before the call).
Against the code before a change: PYTHONPATH=OLD_CHECKOUT (its `rlmesh_stream/` first).

Printed: the commits' median, mean and largest bytes, those of the last wave's commits
(the most producers tracked), and the state's size on disk at the end.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from topics import delete_topics

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the tests' record reader: tests.record_copies

from rlmesh_stream.consumers.datasets.episodes import Filters  # noqa: E402
from rlmesh_stream.consumers.datasets.export import ExportOptions, run_export  # noqa: E402
from rlmesh_stream.consumers.datasets.manifest import ManifestStore  # noqa: E402
from rlmesh_stream.consumers.runtime import RuntimeOptions  # noqa: E402
from rlmesh_stream.infra.topics import ensure_topics  # noqa: E402
from rlmesh_stream.producer.hooks import KafkaRuntimeHooks  # noqa: E402
from rlmesh_stream.producer.simulator import simulate_fleet  # noqa: E402
from rlmesh_stream.schemas.connection.config import StreamConfig  # noqa: E402
from rlmesh_stream.schemas.contract import headers as h  # noqa: E402
from rlmesh_stream.schemas.contract.topics import all_topics  # noqa: E402
from tests.record_copies import read_records  # noqa: E402

_STAMPS = {h.PRODUCER_SEQUENCE, h.PRODUCER_ID, h.SEQUENCE}


def wchar() -> int:
    """Bytes this thread has passed to write() so far."""
    with open("/proc/thread-self/io") as f:
        for line in f:
            if line.startswith("wchar:"):
                return int(line.split()[1])
    raise RuntimeError("no wchar in /proc/thread-self/io")


def publish(config: StreamConfig, waves: int, sessions: int) -> None:
    spool = Path(tempfile.mkdtemp(prefix="rlmesh-bench-spool-"))
    try:
        hooks = KafkaRuntimeHooks(config=config, install_exit_handlers=False,
                                  overflow="spool", spool_dir=spool)
        total = 0
        for wave in range(waves):
            total += simulate_fleet(hooks, sessions=sessions, lanes=1, episodes=2,
                                    seed=wave, failure_rate=0.0,
                                    next_step_fraction=1.0).total_events
        stats = hooks.close(300)
        if stats.delivered != stats.accepted or stats.accepted != total:
            raise SystemExit(f"the fleet was not published whole: {stats}")
    finally:
        shutil.rmtree(spool, ignore_errors=True)


def copy_per_session(original: StreamConfig, copy: StreamConfig) -> int:
    """`original`'s records into `copy`, each session's stamped with a producer id of its
    own; returns how many producer ids."""
    ids: dict[bytes | None, str] = {}
    seqs: dict[str, int] = {}
    producer = Producer({"bootstrap.servers": copy.bootstrap, "linger.ms": 20})
    prefix = original.topic_prefix
    for m in read_records(original, all_topics(original.topic_prefix)):
        pid = ids.setdefault(m.key(), f"producer-{len(ids)}")
        seq = seqs[pid] = seqs.get(pid, -1) + 1
        headers = [(k, v) for k, v in (m.headers() or []) if k not in _STAMPS]
        headers += [(h.PRODUCER_ID, pid.encode()), (h.SEQUENCE, str(seq).encode())]
        while True:
            try:
                producer.produce(copy.topic_prefix + m.topic().removeprefix(prefix), m.value(),
                                 m.key(), m.partition(), headers=headers)
                break
            except BufferError:
                producer.poll(0.1)
    if producer.flush(120):
        raise SystemExit("the copy was not written whole")
    return len(ids)


def measure(config: StreamConfig, out: Path, max_batch: int) -> None:
    written: list[int] = []
    seconds: list[float] = []
    commit = ManifestStore.commit

    def measured(self: ManifestStore, **kwargs: Any) -> None:
        before, start = wchar(), time.perf_counter()
        commit(self, **kwargs)
        seconds.append(time.perf_counter() - start)
        written.append(wchar() - before)

    ManifestStore.commit = measured  # type: ignore[method-assign]
    try:
        run_export(config, ExportOptions(out, "parquet", "rlmesh/bench-v0", Filters()),
                   RuntimeOptions(group_id=f"bench-{uuid.uuid4().hex[:8]}",
                                  from_beginning=True, until_end=True, max_batch=max_batch,
                                  checkpoint_interval=0.0))
    finally:
        ManifestStore.commit = commit  # type: ignore[method-assign]
    state = out / ".rlmesh-export"
    on_disk = sum(p.stat().st_size for p in state.iterdir() if p.is_file())
    tail = written[-max(1, len(written) // 10):]
    print(f"{len(written)} commits: bytes per commit median {statistics.median(written):,.0f}, "
          f"mean {statistics.mean(written):,.0f}, max {max(written):,}; the last tenth's "
          f"median {statistics.median(tail):,.0f}; total {sum(written):,}; store.commit "
          f"median {statistics.median(seconds) * 1000:.1f} ms; state on disk at the end "
          f"{on_disk:,} bytes ({', '.join(sorted(p.name for p in state.iterdir()))})",
          flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--waves", type=int, default=10)
    parser.add_argument("--sessions", type=int, default=100, help="per wave")
    parser.add_argument("--partitions", type=int, default=4, help="per topic")
    parser.add_argument("--max-batch", type=int, default=2000, help="records per commit")
    args = parser.parse_args()
    original, copy = (StreamConfig.from_env(
        env=os.environ, topic_prefix=f"bench{uuid.uuid4().hex[:8]}.rlmesh.runtime")
        for _ in range(2))
    tmp = Path(tempfile.mkdtemp(prefix="rlmesh-bench-state-"))
    try:
        for config in (original, copy):
            ensure_topics(config, partitions=args.partitions)
        start = time.monotonic()
        publish(original, args.waves, args.sessions)
        producers = copy_per_session(original, copy)
        print(f"{args.waves} waves of {args.sessions} sessions (1 lane, 2 episodes each), "
              f"{producers} producer ids, {args.partitions} partitions, --max-batch "
              f"{args.max_batch}; published and copied in {time.monotonic() - start:.0f} s; "
              f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}; "
              f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", flush=True)
        measure(copy, tmp / "ds", args.max_batch)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        for config in (original, copy):
            delete_topics(config)


if __name__ == "__main__":
    main()

"""Processes timed from spawn to exit, wall and CPU: what every whole-process benchmark
compares (bench_consumers.py, bench_export.py). Run from benchmarks/ (a script's folder is
first on its path), so the scripts import it by its bare name."""

from __future__ import annotations

import os
import resource
import subprocess
import time
from typing import Any

from rlmesh_stream.consumers.runtime import kafka_io
from rlmesh_stream.consumers.runtime.options import RuntimeOptions
from rlmesh_stream.schemas.connection.config import StreamConfig

# the runtime's fetch settings (runtime/kafka_io.py), which the bare loops use too: with
# librdkafka's defaults a bare process idled up to 1 s whenever its 64 MB prefetch queue was
# full (fetch.queue.backoff.ms), 2.7 to 3.7 s over 615 000 records instead of 0.8 to 0.9 s
FETCH = ("fetch.wait.max.ms", "max.partition.fetch.bytes", "fetch.queue.backoff.ms",
         "isolation.level")


def bare_config(config: StreamConfig) -> dict[str, Any]:
    """The stack's client settings with the runtime's fetch settings: what every bare loop
    (the floor a consumer is compared with) reads with."""
    tuned = kafka_io.kafka_config(config, RuntimeOptions(group_id="bare"), None)
    return {**config.kafka_config(), **{k: tuned[k] for k in FETCH}}


# The children run as an installed package does: from cached bytecode. With
# PYTHONDONTWRITEBYTECODE set (as in some shells and CI images) every spawned process
# compiled our modules again, ~0.2 s of a short export's start-up that no user pays.
CHILD_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def timed(argv: list[str]) -> tuple[float, float]:
    """Wall seconds from spawn to exit, and the child's CPU seconds (user + sys)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, env=CHILD_ENV)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def timed_together(argvs: list[list[str]]) -> tuple[list[float], float]:
    """Processes started together: each one's wall seconds, and their CPU seconds summed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    procs = [subprocess.Popen(a, stdout=subprocess.DEVNULL, env=CHILD_ENV) for a in argvs]
    walls = [0.0] * len(procs)
    pending = set(range(len(procs)))
    while pending:
        for i in list(pending):
            if procs[i].poll() is not None:
                walls[i] = time.monotonic() - start
                pending.discard(i)
                if procs[i].returncode:
                    raise RuntimeError(f"{argvs[i][:6]}... exited {procs[i].returncode}")
        time.sleep(0.01)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return walls, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)

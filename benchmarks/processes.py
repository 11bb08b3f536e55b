"""Processes timed from spawn to exit, wall and CPU: what every whole-process benchmark
compares (bench_consumers.py, bench_export.py). Run from benchmarks/ (a script's folder is
first on its path), so the scripts import it by its bare name."""

from __future__ import annotations

import resource
import subprocess
import time


def timed(argv: list[str]) -> tuple[float, float]:
    """Wall seconds from spawn to exit, and the child's CPU seconds (user + sys)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def timed_together(argvs: list[list[str]]) -> tuple[list[float], float]:
    """Processes started together: each one's wall seconds, and their CPU seconds summed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    procs = [subprocess.Popen(a, stdout=subprocess.DEVNULL) for a in argvs]
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

"""The interpreter's settings while a consumer runtime reads: the collector, the GIL.

Why: a consumer's hot path is Python on one thread and the checkpoint writer's database
work on another, and two process-wide defaults cost it:

- A batch's records are short-lived and hold no cycles, yet each is an object the cyclic
  collector tracks: with the default thresholds it ran every 700 allocations and
  re-scanned the buffered records and every imported module's objects again and again,
  ~10% of `consume episodes`' CPU. What exists before reading starts (modules, schemas,
  generated readers) is frozen out of the scans, and the youngest generation is collected
  once 500 000 tracked objects more are alive than at the last collection: more than a
  runtime holds at once (a buffer, a cut and a checkpoint in flight, about two tracked
  objects a record), so a checkpoint's records die by their reference counts before any
  scan reaches them. At 50 000, two to four scans a 120 000-event run took 80 to 170 ms
  (median 95 500 events/s at 50 000, 106 700 at 500 000: +12%). The hot path makes no
  reference cycles; what other
  code makes is collected after at most that many objects.
- The checkpoint writer's database statement releases the GIL but takes it back now and
  then while it runs; with the default 5 ms switch interval the busy reading thread keeps
  it waiting up to 5 ms each time (a 20 000-row DuckDB merge: 160 to 240 ms beside the
  reading thread, 70 ms alone); at 0.5 ms, ~80 ms. At 0.1 ms the whole in-process run
  is ~10% faster again (0.5 and 0.2 ms tried: 0.1 ms kept).

Both are process-wide: they are set when the first runtime of a process starts reading
and restored when the last one returns, so a process that embeds runtimes gets its own
settings back.
"""

from __future__ import annotations

import contextlib
import gc
import sys
import threading
from collections.abc import Iterator
from typing import Any

GEN0_THRESHOLD = 500_000
SWITCH_INTERVAL_S = 0.0001

_lock = threading.Lock()
_readers = 0
_saved: dict[str, Any] = {}


@contextlib.contextmanager
def tuned_for_reading() -> Iterator[None]:
    """The tuned settings for the duration of the block (nested and concurrent blocks
    share one tuning, undone by the last to leave)."""
    global _readers
    with _lock:
        if _readers == 0:
            _tune()
        _readers += 1
    try:
        yield
    finally:
        with _lock:
            _readers -= 1
            if _readers == 0:
                _restore()


def _tune() -> None:
    thresholds = gc.get_threshold()
    _saved.update(thresholds=thresholds, frozen=gc.get_freeze_count(),
                  switch=sys.getswitchinterval())
    gc.freeze()
    gc.set_threshold(max(thresholds[0], GEN0_THRESHOLD), *thresholds[1:])
    sys.setswitchinterval(min(_saved["switch"], SWITCH_INTERVAL_S))


def _restore() -> None:
    sys.setswitchinterval(_saved["switch"])
    gc.set_threshold(*_saved["thresholds"])
    if not _saved["frozen"]:  # what the embedding process froze itself stays frozen
        gc.unfreeze()
    _saved.clear()

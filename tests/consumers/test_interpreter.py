"""While a runtime reads, the collector and the switch interval are tuned; afterwards the
process has its own settings back, however many runtimes overlapped."""

from __future__ import annotations

import gc
import sys

from rlmesh_stream.consumers.runtime.interpreter import (
    GEN0_THRESHOLD,
    SWITCH_INTERVAL_S,
    tuned_for_reading,
)


def test_reading_tunes_the_collector_and_the_switch_interval() -> None:
    with tuned_for_reading():
        assert gc.get_threshold()[0] >= GEN0_THRESHOLD
        assert sys.getswitchinterval() <= SWITCH_INTERVAL_S
        assert gc.get_freeze_count() > 0


def test_the_process_gets_its_settings_back_after_reading() -> None:
    before = (gc.get_threshold(), sys.getswitchinterval(), gc.get_freeze_count())
    with tuned_for_reading():
        pass
    assert (gc.get_threshold(), sys.getswitchinterval(), gc.get_freeze_count()) == before


def test_overlapping_runtimes_restore_once_the_last_one_returns() -> None:
    before = gc.get_threshold()
    first, second = tuned_for_reading(), tuned_for_reading()
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)
    assert gc.get_threshold()[0] >= GEN0_THRESHOLD  # the second still reads
    second.__exit__(None, None, None)
    assert gc.get_threshold() == before


def test_what_the_process_froze_itself_stays_frozen() -> None:
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with tuned_for_reading():
            pass
        assert gc.get_freeze_count() >= frozen
    finally:
        gc.unfreeze()

"""`Handoff`: calls run in order on one worker; a barrier waits for them; errors surface."""

from __future__ import annotations

import threading

import pytest

from rlmesh_stream.producer.handoff import Handoff


def test_calls_run_in_order_on_one_worker_thread_and_a_barrier_waits_for_them() -> None:
    handoff = Handoff("test", interval=10.0)  # only a barrier wakes it: nothing runs early
    seen: list[tuple[int, int]] = []
    for i in range(1000):
        handoff.submit(lambda i=i: seen.append((i, threading.get_ident())))
    assert handoff.barrier(timeout=5)
    assert [i for i, _ in seen] == list(range(1000))
    assert len({t for _, t in seen}) == 1 and seen[0][1] != threading.get_ident()
    handoff.stop()


def test_a_failed_call_is_raised_on_the_callers_thread_once_and_later_calls_still_run() -> None:
    handoff = Handoff("test", interval=0.001)
    seen: list[int] = []

    def boom() -> None:
        raise ValueError("encode failed")

    handoff.submit(boom)
    handoff.submit(seen.append, 1)
    with pytest.raises(ValueError, match="encode failed"):
        handoff.barrier(timeout=5)
    assert seen == [1]
    handoff.submit(seen.append, 2)
    assert handoff.barrier(timeout=5) and seen == [1, 2]
    handoff.stop()


def test_after_stop_the_next_calls_go_to_a_new_worker_while_the_old_one_finishes() -> None:
    handoff = Handoff("test", interval=0.001)
    seen: list[int] = []
    gate = threading.Event()
    handoff.submit(gate.wait, 5)  # the first worker is still busy when the next run starts
    handoff.submit(seen.append, 1)
    handoff.stop()
    handoff.submit(seen.append, 2)
    gate.set()
    assert handoff.barrier(timeout=5)
    handoff.stop()
    assert 2 in seen


def test_submit_waits_for_the_worker_beyond_max_pending() -> None:
    handoff = Handoff("test", interval=10.0, max_pending=10)
    seen: list[int] = []
    for i in range(100):
        handoff.submit(seen.append, i)
        assert i - len(seen) <= 10  # never more than max_pending waiting
    assert handoff.barrier(timeout=5) and seen == list(range(100))
    handoff.stop()

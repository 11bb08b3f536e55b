"""PostgreSQL: the keys a checkpoint locks (`SinkBatch.locks`, the sessions of an episodes
batch). Up to `MAX_KEY_LOCKS` keys, one advisory lock each; a checkpoint of more takes one
lock for every key instead, since PostgreSQL's lock table holds only
max_locks_per_transaction x max_connections locks in all (6 400 by default), and a backlog's
checkpoint of 15 000 sessions ran out of it."""

from __future__ import annotations

import threading
import time

import pytest

from rlmesh_stream.consumers.sinks import SinkBatch, open_sink
from rlmesh_stream.consumers.sinks.postgres_sink import MAX_KEY_LOCKS

pytestmark = pytest.mark.postgres


def test_a_checkpoint_locking_more_keys_than_the_lock_table_holds_is_applied(
        postgres_dsn: str) -> None:
    sink = open_sink(postgres_dsn)
    try:
        sink.apply(SinkBatch(locks=[f"episodes:s{i:05d}" for i in range(15_000)],
                             after_sql=["CREATE TABLE applied (x int)"]))
        assert sink.query("SELECT count(*) FROM applied") == [(0,)]
    finally:
        sink.close()


def test_a_checkpoint_of_many_keys_waits_for_one_holding_a_few_of_them(
        postgres_dsn: str) -> None:
    few, many = open_sink(postgres_dsn), open_sink(postgres_dsn)
    order: list[str] = []
    holding = threading.Event()

    def hold_a_few() -> None:
        with few._transaction():
            few._lock_keys(["episodes:s00001"])
            holding.set()
            time.sleep(0.5)
            order.append("few committed")

    thread = threading.Thread(target=hold_a_few)
    thread.start()
    try:
        assert holding.wait(10)
        many.apply(SinkBatch(locks=[f"episodes:s{i:05d}" for i in range(MAX_KEY_LOCKS + 1)]))
        order.append("many applied")
    finally:
        thread.join(10)
        few.close()
        many.close()
    assert order == ["few committed", "many applied"]

"""A PostgreSQL sink whose connection is lost (the backend terminated, the server
restarted) reconnects on the next checkpoint instead of failing every one after it: the
batch is applied once, its offsets stored."""

from __future__ import annotations

import psycopg
import pytest

from rlmesh_stream.consumers.runtime.checkpoint_writer import _apply
from rlmesh_stream.consumers.sinks import OffsetUpdate, SinkBatch, open_sink

pytestmark = pytest.mark.postgres


def _terminate(dsn: str, pid: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))


def _batch(expected: int | None, nxt: int) -> SinkBatch:
    return SinkBatch(offsets=[OffsetUpdate("episodes", "t", 0, expected, nxt)],
                     group_id="g")


def test_a_terminated_backend_is_reconnected_and_the_checkpoint_applied_once(
    postgres_dsn: str,
) -> None:
    sink = open_sink(postgres_dsn)
    try:
        _apply(sink, _batch(None, 5))
        _terminate(postgres_dsn, sink.query("SELECT pg_backend_pid()")[0][0])

        _apply(sink, _batch(5, 9))

        assert sink.load_offsets("episodes") == {("t", 0): 9}
    finally:
        sink.close()

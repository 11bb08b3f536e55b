"""A record Kafka did not take that cannot go back to the spool: both errors in one log line.

Kafka is a port nothing listens on, so every record times out in librdkafka
(_MSG_TIMED_OUT) and goes back to the spool, which cannot take it: a segment
that is /dev/full (the disk is full), or a spool at its size bound. The
registry is the real one, so records reach librdkafka first.
"""

from __future__ import annotations

import logging
import time
import uuid

import pytest
from producer_helpers import TcpGate
from producer_samples import step

from rlmesh_stream.schemas.config import StreamConfig

pytestmark = pytest.mark.stack


def _failures(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno == logging.ERROR and "event not delivered" in r.getMessage()]


def _kafka_away(stack, topic_prefix: str) -> StreamConfig:
    nobody = TcpGate("127.0.0.1", 1)  # never opened: connections to its port are refused
    return StreamConfig(bootstrap=f"127.0.0.1:{nobody.port}", registry_url=stack.registry_url,
                        topic_prefix=topic_prefix)


def _emit_and_wait_for_failures(hooks, count: int) -> None:
    session = str(uuid.uuid4())
    for i in range(count):
        hooks.step_completed(step(session, i))
    deadline = time.monotonic() + 30
    while hooks.stats().failed_total < count and time.monotonic() < deadline:
        time.sleep(0.1)


def test_a_timed_out_record_the_spool_cannot_write_is_logged_with_the_kafka_and_the_os_error(
    stack, topic_prefix, make_hooks, tmp_path, caplog,
):
    caplog.set_level(logging.ERROR, logger="rlmesh_stream.producer.delivery")
    hooks = make_hooks(config=_kafka_away(stack, topic_prefix), overflow="spool",
                       spool_dir=tmp_path, delivery_timeout_ms=1500, startup_wait_s=10)
    (tmp_path / hooks.producer_id / "000000000000.seg").symlink_to("/dev/full")  # disk full

    _emit_and_wait_for_failures(hooks, 5)

    stats = hooks.stats()
    assert stats.failed == {"spool:OSError": 5}
    first = _failures(caplog)[0]
    assert "_MSG_TIMED_OUT" in first  # what Kafka said
    assert "No space left on device" in first  # and why the spool could not keep it


def test_a_timed_out_record_the_full_spool_cannot_take_is_logged_with_the_kafka_error_and_why(
    stack, topic_prefix, make_hooks, tmp_path, caplog,
):
    caplog.set_level(logging.ERROR, logger="rlmesh_stream.producer.delivery")
    hooks = make_hooks(config=_kafka_away(stack, topic_prefix), overflow="spool",
                       spool_dir=tmp_path, spool_max_bytes=1, delivery_timeout_ms=1500,
                       startup_wait_s=10)

    _emit_and_wait_for_failures(hooks, 5)

    stats = hooks.stats()
    assert stats.failed == {"_MSG_TIMED_OUT": 5}
    first = _failures(caplog)[0]
    assert "_MSG_TIMED_OUT" in first
    assert "spool" in first and "is full (spool_max_bytes=1)" in first

"""A record Kafka did not take that cannot go back to the spool: both errors in one log line.

Kafka is a port that accepts connections and never answers (a hung broker:
not known unreachable, so records reach librdkafka and time out there,
_MSG_TIMED_OUT), or a port nothing listens on (known unreachable at once:
the records librdkafka holds are moved to the spool). Either way they go
back to the spool, which cannot take them: a segment that is /dev/full (the
disk is full), or a spool at its size bound. The registry is the real one,
so records reach librdkafka first.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator

import pytest

from rlmesh_stream.schemas.connection.config import StreamConfig
from tests.loopback import silent_port
from tests.producer.producer_helpers import TcpGate
from tests.producer.producer_samples import step

pytestmark = pytest.mark.stack


def _failures(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno == logging.ERROR and "event not delivered" in r.getMessage()]


@pytest.fixture
def hung_broker() -> Iterator[str]:
    """A bootstrap address that accepts connections and never says a word."""
    with silent_port() as port:
        yield f"127.0.0.1:{port}"


def _kafka_at(bootstrap: str, stack, topic_prefix: str) -> StreamConfig:
    return StreamConfig(bootstrap=bootstrap, registry_url=stack.registry_url,
                        topic_prefix=topic_prefix)


def _kafka_away(stack, topic_prefix: str) -> StreamConfig:
    nobody = TcpGate("127.0.0.1", 1)  # never opened: connections to its port are refused
    return _kafka_at(f"127.0.0.1:{nobody.port}", stack, topic_prefix)


def _emit_and_wait_for_failures(hooks, count: int) -> None:
    session = str(uuid.uuid4())
    for i in range(count):
        hooks.step_completed(step(session, i))
    deadline = time.monotonic() + 30
    while hooks.stats().failed_total < count and time.monotonic() < deadline:
        time.sleep(0.1)


def test_a_timed_out_record_the_spool_cannot_write_is_logged_with_the_kafka_and_the_os_error(
    stack, topic_prefix, make_hooks, tmp_path, caplog, hung_broker,
):
    caplog.set_level(logging.ERROR, logger="rlmesh_stream.producer.delivery")
    hooks = make_hooks(config=_kafka_at(hung_broker, stack, topic_prefix), overflow="spool",
                       spool_dir=tmp_path, delivery_timeout_ms=1500, startup_wait_s=10)
    (tmp_path / hooks.producer_id / "000000000000.seg").symlink_to("/dev/full")  # disk full

    _emit_and_wait_for_failures(hooks, 5)

    stats = hooks.stats()
    assert stats.failed == {"spool:OSError": 5}
    first = _failures(caplog)[0]
    assert "_MSG_TIMED_OUT" in first  # what Kafka said
    assert "No space left on device" in first  # and why the spool could not keep it


def test_a_timed_out_record_the_full_spool_cannot_take_is_logged_with_the_kafka_error_and_why(
    stack, topic_prefix, make_hooks, tmp_path, caplog, hung_broker,
):
    caplog.set_level(logging.ERROR, logger="rlmesh_stream.producer.delivery")
    hooks = make_hooks(config=_kafka_at(hung_broker, stack, topic_prefix), overflow="spool",
                       spool_dir=tmp_path, spool_max_bytes=1, delivery_timeout_ms=1500,
                       startup_wait_s=10)

    _emit_and_wait_for_failures(hooks, 5)

    stats = hooks.stats()
    assert stats.failed == {"_MSG_TIMED_OUT": 5}
    first = _failures(caplog)[0]
    assert "_MSG_TIMED_OUT" in first
    assert "spool" in first and "is full (spool_max_bytes=1)" in first


def test_with_kafka_unreachable_and_the_spool_full_every_event_is_counted_none_left_in_memory(
    stack, topic_prefix, make_hooks, tmp_path, caplog,
):
    caplog.set_level(logging.WARNING)
    hooks = make_hooks(config=_kafka_away(stack, topic_prefix), overflow="spool",
                       spool_dir=tmp_path, spool_max_bytes=1, startup_wait_s=10)
    session = str(uuid.uuid4())

    for i in range(5):
        hooks.step_completed(step(session, i))
    deadline = time.monotonic() + 30
    while hooks.stats().unresolved and time.monotonic() < deadline:
        time.sleep(0.05)

    stats = hooks.stats()
    # Held at once (dropped: the spool is full), or moved out of librdkafka and failed with
    # the outage's error: never left waiting in memory.
    assert stats.unresolved == 0
    assert stats.dropped + stats.failed.get("_ALL_BROKERS_DOWN", 0) == 5
    assert "spool full" in caplog.text or "brokers are down" in caplog.text

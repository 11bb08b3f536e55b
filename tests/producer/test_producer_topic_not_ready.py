"""A topic Kafka does not know yet (being created, no leader yet): retried, for a bounded time.

A broker that just started, or a topic being auto-created, answers
UNKNOWN_TOPIC_OR_PART (librdkafka: _UNKNOWN_TOPIC) for a while. The hook puts
such records back in its backlog (the spool, or memory without one) and
produces them again, so they land once each; a topic that never appears is
counted failed, with a reason, once it has answered like this for
`topic_wait_s`.

"A topic being created" is made deterministic here: the hook may not
auto-create topics (`allow.auto.create.topics=false`, and librdkafka gives up
on a topic missing from the metadata after one second instead of thirty), so
its records fail with the same errors until the test creates the topic.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

import pytest

from rlmesh_stream.infra.topics import ensure_topics
from rlmesh_stream.producer.delivery import TOPIC_NOT_READY_ERRORS
from rlmesh_stream.schemas.connection.config import StreamConfig
from rlmesh_stream.schemas.contract.topics import EventType
from tests.producer.producer_helpers import read_back
from tests.producer.producer_samples import step

pytestmark = pytest.mark.stack

NO_AUTO_CREATE: dict[str, Any] = {"allow.auto.create.topics": False,
                                  "topic.metadata.propagation.max.ms": 1000}
NOT_READY_NAMES = {"UNKNOWN_TOPIC_OR_PART", "_UNKNOWN_TOPIC", "_UNKNOWN_PARTITION",
                   "LEADER_NOT_AVAILABLE", "NOT_LEADER_FOR_PARTITION"}


def _wait_until(predicate: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.1)


@pytest.mark.parametrize("backlog", ["memory", "spool"])
def test_events_for_a_topic_still_being_created_are_held_and_land_once_it_exists(
    make_hooks, stream_config: StreamConfig, tmp_path, backlog: str,
):
    spool = {"overflow": "spool", "spool_dir": tmp_path / "spool"} if backlog == "spool" else {}
    hooks = make_hooks(kafka_overrides=NO_AUTO_CREATE, **spool)
    session = str(uuid.uuid4())
    for i in range(200):
        hooks.step_completed(step(session, i))
    # Kafka has answered "unknown topic" for them, and they went back to the backlog.
    _wait_until(lambda: hooks.stats().spooled_total >= 200, 20)
    during = hooks.stats()
    ensure_topics(stream_config, partitions=3,
                  topics=[EventType.STEP_COMPLETED.topic(stream_config.topic_prefix)])

    assert hooks.flush(60) == 0
    after = hooks.stats()
    landed = read_back(stream_config.bootstrap, stream_config.registry_url,
                       stream_config.topic_prefix, expected=200, decode=False)

    assert during.spooled_total >= 200 and during.delivered == 0 and during.failed == {}
    assert (after.accepted, after.delivered, after.failed, after.dropped) == (200, 200, {}, 0)
    assert sorted(r.sequence for r in landed) == list(range(200))  # each exactly once


def test_events_for_a_topic_that_never_appears_are_counted_failed_after_the_bound(
    make_hooks, stream_config: StreamConfig, caplog,
):
    caplog.set_level(logging.ERROR, logger="rlmesh_stream.producer.delivery")
    hooks = make_hooks(kafka_overrides=NO_AUTO_CREATE, topic_wait_s=3.0)
    session = str(uuid.uuid4())
    started = time.monotonic()
    for i in range(50):
        hooks.step_completed(step(session, i))

    left = hooks.flush(30)
    took = time.monotonic() - started
    stats = hooks.stats()

    topic = EventType.STEP_COMPLETED.topic(stream_config.topic_prefix)
    assert left == 0 and took < 20  # 1 s for librdkafka to give up + 3 s bound + retries
    assert stats.delivered == 0 and stats.failed_total == 50
    assert set(stats.failed) <= NOT_READY_NAMES
    said = [r.getMessage() for r in caplog.records]
    assert any(f"topic {topic!r} still unavailable" in m and "does not exist" in m
               for m in said), said


def test_the_topic_errors_retried_are_not_also_permanent():
    from rlmesh_stream.producer.delivery import PERMANENT_ERRORS

    assert not TOPIC_NOT_READY_ERRORS & PERMANENT_ERRORS

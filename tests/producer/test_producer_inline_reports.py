"""The publishing thread serves the delivery reports that are ready, a bounded share of them.

Every 256 events the hook's publish serves what librdkafka has reported
(`Drainer.serve_inline`), so records are released without a GIL hand-off
to the poller thread. A failure's account is work of its own (a record may
go back to the spool), so at most one is handled there per call; the rest
stay queued for the poller thread. Both are shown here with the hook's
poller and drainer threads stopped, so nothing else serves the reports.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from rlmesh_stream.producer.hooks import KafkaRuntimeHooks
from rlmesh_stream.schemas.connection.config import StreamConfig
from rlmesh_stream.schemas.contract.topics import EventType
from tests.producer.producer_samples import step

pytestmark = pytest.mark.stack


def _without_threads(hooks: KafkaRuntimeHooks) -> None:
    """Stop the hook's poller and drainer: only the publishing thread serves reports now."""
    assert hooks.schemas_ready  # events go straight to librdkafka, none held for the drainer
    hooks._drainer.stop_draining(timeout=5)
    hooks._drainer.stop_polling(timeout=5)


def _wait_until(predicate: Any, timeout: float, step: Any = None) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if step is not None:
            step()
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def test_publishing_serves_delivery_reports_without_the_poller_thread(make_hooks):
    hooks = make_hooks(startup_wait_s=15)
    _without_threads(hooks)
    session = str(uuid.uuid4())
    published = 0

    def publish_a_round() -> None:
        nonlocal published
        for _ in range(256):
            hooks.step_completed(step(session, published))
            published += 1

    # librdkafka lets go of a record once its report is served: here, only by publishing.
    assert _wait_until(lambda: len(hooks._producer) < published, 30, publish_a_round)
    assert hooks.stats().delivered > 0


def test_a_burst_of_failures_is_handled_one_at_a_time_on_the_publishing_thread(
    make_hooks, stream_config: StreamConfig,
):
    # The broker refuses every record of this topic (a batch above 200 bytes): a permanent
    # error, so Kafka still counts as answering and the publishing thread keeps serving.
    topic = EventType.STEP_COMPLETED.topic(stream_config.topic_prefix)
    admin = AdminClient({"bootstrap.servers": stream_config.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config={"max.message.bytes": "200"})])[
        topic].result(30)
    hooks = make_hooks(startup_wait_s=15)
    _without_threads(hooks)
    session = str(uuid.uuid4())
    for i in range(100):
        hooks.step_completed(step(session, i))
    drainer = hooks._drainer

    def failed() -> int:
        return hooks.stats().failed_total

    assert _wait_until(lambda: failed() > 0, 30, drainer.serve_inline)
    assert failed() == 1  # one failure's account per call; the others stay queued
    drainer.serve_inline()
    assert failed() == 2
    assert _wait_until(lambda: failed() == 100, 30, lambda: hooks._producer.poll(0.1))
    assert hooks.stats().failed == {"MSG_SIZE_TOO_LARGE": 100}

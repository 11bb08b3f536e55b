"""The progress line's lag counts what is not applied yet: records read but not written
to the sink (held in the buffer, in a checkpoint being written, or re-read after a
registry outage) are lag, so the line never says `lag 0` while they wait."""

from __future__ import annotations

import io
import re
import threading
import time
import uuid
from collections.abc import Callable

import pytest

from rlmesh_stream.consumers.builders import make_builders
from rlmesh_stream.consumers.progress import Progress
from rlmesh_stream.consumers.runtime import ConsumerRuntime, RuntimeOptions
from rlmesh_stream.consumers.sinks import SinkBatch, open_sink
from rlmesh_stream.schemas.connection.config import StreamConfig
from rlmesh_stream.schemas.contract import events as ev
from rlmesh_stream.schemas.contract.topics import EventType
from tests.consumers.consumer_helpers import PlainKafkaHooks, create_topics

pytestmark = pytest.mark.stack

ROUTE = ev.RuntimeEnvContext(env_id="e", env_component_id="ec", model_component_id="m")
SESSIONS = 20


def _wait_for(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.fixture
def published(stream_config: StreamConfig) -> StreamConfig:
    create_topics(stream_config, partitions=2)
    hooks = PlainKafkaHooks(stream_config)
    for i in range(SESSIONS):
        hooks.publish(EventType.SESSION_STARTED,
                      ev.SessionStartedEvent(session_id=f"s{i}", route=ROUTE, env_id="e"))
    hooks.flush()
    return stream_config


def _lags(stream: io.StringIO) -> list[tuple[int, int]]:
    """(events, lag) of every progress line printed so far."""
    return [(int(m[1]), int(m[2])) for m in
            re.finditer(r"(\d+) events, [\d,]+ events/s, lag (\d+)", stream.getvalue())]


def test_a_registry_outage_is_not_shown_as_lag_0(
        published: StreamConfig, duckdb_url: str,
        runtime_thread: Callable[[ConsumerRuntime], threading.Thread]) -> None:
    down = StreamConfig.from_env(env={}, bootstrap=published.bootstrap,
                                 registry_url="http://127.0.0.1:1/apis/ccompat/v7",
                                 topic_prefix=published.topic_prefix)
    stream = io.StringIO()
    progress = Progress("consume sessions", stream=stream, interval=0)
    runtime = ConsumerRuntime(down, make_builders(["sessions"]), open_sink(duckdb_url),
                              RuntimeOptions(group_id=uuid.uuid4().hex, from_beginning=True),
                              progress=progress)
    thread = runtime_thread(runtime)
    _wait_for(lambda: stream.getvalue().count("registry unavailable") >= 2)
    runtime.stop()
    thread.join(30)
    lags = _lags(stream)
    assert lags and lags[-1] == (0, SESSIONS), stream.getvalue()
    assert all(lag > 0 for events, lag in lags if events == 0), lags


def test_records_read_but_not_yet_written_are_lag(
        published: StreamConfig, duckdb_url: str,
        runtime_thread: Callable[[ConsumerRuntime], threading.Thread]) -> None:
    """The sink is slow: every record is read, the checkpoint holding them is still being
    written."""
    sink = open_sink(duckdb_url)
    release = threading.Event()
    apply = sink.apply

    def held_apply(batch: SinkBatch) -> None:
        release.wait(60)
        apply(batch)

    sink.apply = held_apply  # type: ignore[method-assign]
    stream = io.StringIO()
    runtime = ConsumerRuntime(published, make_builders(["sessions"]), sink,
                              RuntimeOptions(group_id=uuid.uuid4().hex, from_beginning=True,
                                             checkpoint_interval=0.1),
                              progress=Progress("consume sessions", stream=stream, interval=0))
    runtime_thread(runtime)
    try:
        _wait_for(lambda: sum(runtime.offsets.next.values()) == SESSIONS)  # all read
        time.sleep(0.5)  # a few more progress lines
        assert _lags(stream)[-1] == (0, SESSIONS), stream.getvalue()
    finally:
        release.set()
    _wait_for(lambda: runtime.events == SESSIONS)
    _wait_for(lambda: _lags(stream)[-1] == (SESSIONS, 0))


def test_before_the_first_fetch_the_lag_counts_from_the_end_seen_at_assignment(
        published: StreamConfig) -> None:
    """The consumer's cached watermarks are unknown until it has fetched: the lag is then
    the partitions' ends seen at assignment, never 0 (the first progress line of a run
    whose registry was down said `lag 0`)."""
    from confluent_kafka import Consumer, TopicPartition

    from rlmesh_stream.consumers.runtime.offsets import Offsets

    builders = make_builders(["sessions"])
    offsets = Offsets(builders, published.topic_prefix,
                      RuntimeOptions(group_id=uuid.uuid4().hex, from_beginning=True))
    topic = EventType.SESSION_STARTED.topic(published.topic_prefix)
    consumer = Consumer({**published.kafka_config(), "group.id": uuid.uuid4().hex})
    try:
        offsets.assign(consumer, [TopicPartition(topic, 0), TopicPartition(topic, 1)],
                       lambda key, stored, marks: stored)
        assert consumer.get_watermark_offsets(TopicPartition(topic, 0), cached=True)[1] < 0
        assert offsets.unapplied(consumer) == SESSIONS
        lags = offsets.lag_by_partition(consumer)
        assert lags is not None and sum(lags.values()) == SESSIONS
    finally:
        consumer.close()

"""Callers that misuse the hook are refused and counted, never published wrongly or silently.

An event handed to the wrong callback is never framed with that callback's
schema id (it would be counted delivered, then dead-lettered downstream);
`publish(None)` fails like any callback failure instead of raising into the
caller; events after `close()` and drops under `overflow="drop"` are
counted and logged (rate-limited), never silent.
"""

from __future__ import annotations

import logging
import re
import time
import uuid

import pytest

from rlmesh_stream.infra import proc
from rlmesh_stream.schemas.connection.config import StreamConfig
from tests.producer.producer_helpers import read_back
from tests.producer.producer_samples import step


def test_an_event_given_to_the_wrong_callback_is_a_contract_failure_never_published(
    make_hooks, stream_config,
):
    hooks = make_hooks()

    hooks.episode_completed(step(str(uuid.uuid4()), 0))  # a StepCompletedEvent
    assert hooks.flush(10) == 0

    stats = hooks.stats()
    assert stats.failed == {"contract:TypeError": 1}
    assert (stats.accepted, stats.delivered) == (1, 0)
    assert read_back(stream_config.bootstrap, stream_config.registry_url,
                     stream_config.topic_prefix, expected=1, timeout=5, decode=False) == []


def test_publish_of_something_not_an_event_is_counted_failed_and_never_raises(
    make_hooks, caplog: pytest.LogCaptureFixture,
):
    hooks = make_hooks()
    caplog.set_level(logging.ERROR)

    hooks.publish(None)  # type: ignore[arg-type]

    assert hooks.stats().failed == {"contract:TypeError": 1}
    assert "not a runtime event: NoneType" in caplog.text


def test_events_after_close_are_counted_dropped_and_said_once(
    make_hooks, caplog: pytest.LogCaptureFixture,
):
    hooks = make_hooks()
    hooks.close(5)
    caplog.set_level(logging.WARNING)

    for i in range(3):
        hooks.step_completed(step(str(uuid.uuid4()), i))

    assert hooks.stats().dropped == 3
    said = [r for r in caplog.records if "after close()" in r.getMessage()]
    assert len(said) == 1


def test_drops_under_the_drop_policy_are_logged_with_their_counts_at_most_once_a_second(
    make_hooks, stack, topic_prefix, caplog: pytest.LogCaptureFixture,
):
    unreachable = StreamConfig(bootstrap=f"127.0.0.1:{proc.free_port()}",
                               registry_url=stack.registry_url, topic_prefix=topic_prefix)
    hooks = make_hooks(config=unreachable, overflow="drop", queue_max_messages=10,
                       max_block_ms=0, startup_wait_s=10)
    caplog.set_level(logging.WARNING)
    session = str(uuid.uuid4())

    started = time.monotonic()
    for i in range(2000):
        hooks.step_completed(step(session, i))
    dropped = hooks.stats().dropped
    hooks.close(1)
    seconds = time.monotonic() - started

    lines = [r.getMessage() for r in caplog.records if "events dropped" in r.getMessage()]
    counts = [int(re.search(r"(\d+) events dropped", line).group(1))  # type: ignore[union-attr]
              for line in lines]
    assert dropped == 1990
    assert sum(counts) == dropped  # every drop is in a line, once
    assert 1 <= len(lines) <= seconds + 2  # at most one a second (+ the one at close)
    assert "queue full" in lines[0] and "overflow='drop'" in lines[0]

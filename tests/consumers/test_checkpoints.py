"""When the runtime checkpoints: on a backlog, no more often than four times the last
checkpoint's cost; reading live, every `checkpoint_interval`; always at `max_batch`."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from rlmesh_stream.consumers.builders import EpisodesBuilder
from rlmesh_stream.consumers.records import Record
from rlmesh_stream.consumers.runtime import ConsumerRuntime, RuntimeOptions
from rlmesh_stream.consumers.sinks import open_sink
from rlmesh_stream.schemas.config import StreamConfig
from rlmesh_stream.schemas.topics import EventType


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[ConsumerRuntime]:
    sink = open_sink(f"duckdb://{tmp_path / 'store.duckdb'}")  # nothing here reaches Kafka
    rt = ConsumerRuntime(StreamConfig(), [EpisodesBuilder()], sink,
                         RuntimeOptions(group_id="g", checkpoint_interval=1.0, max_batch=10))
    yield rt
    sink.close()


def _buffer(rt: ConsumerRuntime, records: int, last_checkpoint_ago: float,
            last_checkpoint_cost: float, behind: bool) -> None:
    rt._buffer = [Record("t", 0, i, datetime(2026, 1, 1, tzinfo=UTC),
                         EventType.EPISODE_STARTED, None) for i in range(records)]
    rt._last_flush = time.monotonic() - last_checkpoint_ago
    rt._flush_cost = last_checkpoint_cost
    rt._behind = behind


def test_a_backlog_spaces_checkpoints_to_four_times_the_last_ones_cost(
        runtime: ConsumerRuntime) -> None:
    _buffer(runtime, 3, last_checkpoint_ago=1.5, last_checkpoint_cost=0.5, behind=True)
    assert not runtime._checkpoint_due()  # 1.5 s < 4 x 0.5 s
    _buffer(runtime, 3, last_checkpoint_ago=2.1, last_checkpoint_cost=0.5, behind=True)
    assert runtime._checkpoint_due()


def test_reading_live_checkpoints_every_interval_whatever_the_last_cost(
        runtime: ConsumerRuntime) -> None:
    _buffer(runtime, 3, last_checkpoint_ago=1.1, last_checkpoint_cost=0.5, behind=False)
    assert runtime._checkpoint_due()


def test_max_batch_records_checkpoint_at_once_even_on_a_backlog(
        runtime: ConsumerRuntime) -> None:
    _buffer(runtime, 10, last_checkpoint_ago=0.0, last_checkpoint_cost=5.0, behind=True)
    assert runtime._checkpoint_due()

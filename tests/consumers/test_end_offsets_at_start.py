"""A live run asks Kafka for each partition's end offset before it joins its group, so
that what is published while the group forms is read. A failed request is tried again;
only when every try fails does the run fall back to starting at each partition's end
(and says so)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rlmesh_stream.consumers.builders import EpisodesBuilder
from rlmesh_stream.consumers.runtime import ConsumerRuntime, RuntimeOptions, core, kafka_io
from rlmesh_stream.consumers.sinks import open_sink
from rlmesh_stream.schemas.connection.config import StreamConfig


class _Kafka:
    """`kafka_io.end_offsets` as a broker that fails the first `failures` requests."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.requests = 0

    def end_offsets(self, *_: Any) -> dict[tuple[str, int], int]:
        self.requests += 1
        if self.requests <= self.failures:
            raise RuntimeError("KafkaError{code=_TRANSPORT}")
        return {("t", 0): 7}


@pytest.fixture
def runtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ConsumerRuntime]:
    monkeypatch.setattr(core, "_END_OFFSET_PAUSE_S", 0.0)
    sink = open_sink(f"duckdb://{tmp_path / 'store.duckdb'}")  # nothing here reaches Kafka
    rt = ConsumerRuntime(StreamConfig(), [EpisodesBuilder()], sink, RuntimeOptions(group_id="g"))
    rt.consumer = object()  # type: ignore[assignment]
    yield rt
    sink.close()


def _broker(monkeypatch: pytest.MonkeyPatch, failures: int) -> _Kafka:
    kafka = _Kafka(failures)
    monkeypatch.setattr(kafka_io, "end_offsets", kafka.end_offsets)
    return kafka


def test_a_failed_end_offsets_request_is_tried_again(
        runtime: ConsumerRuntime, monkeypatch: pytest.MonkeyPatch) -> None:
    kafka = _broker(monkeypatch, failures=2)
    assert runtime._ends_at_start() == {("t", 0): 7}
    assert kafka.requests == 3


def test_when_every_try_fails_the_run_starts_at_the_ends_and_warns(
        runtime: ConsumerRuntime, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    kafka = _broker(monkeypatch, failures=10)
    with caplog.at_level(logging.WARNING):
        assert runtime._ends_at_start() is None
    assert kafka.requests == core._END_OFFSET_TRIES
    assert "no end offsets at start" in caplog.text


def test_a_stopping_run_does_not_try_again(
        runtime: ConsumerRuntime, monkeypatch: pytest.MonkeyPatch) -> None:
    kafka = _broker(monkeypatch, failures=10)
    runtime.stop()
    assert runtime._ends_at_start() is None
    assert kafka.requests == 1

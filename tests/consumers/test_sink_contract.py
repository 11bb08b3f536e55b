"""The sink contract (`consumers.sinks.Sink`): what the runtime calls on every sink, table
or dataset, and what it does when a sink's head start fails."""

from __future__ import annotations

import logging

import pytest

from rlmesh_stream.consumers.builders import EpisodesBuilder
from rlmesh_stream.consumers.datasets.sink import DatasetSink
from rlmesh_stream.consumers.runtime import ConsumerRuntime, RuntimeOptions
from rlmesh_stream.consumers.runtime.records import TP
from rlmesh_stream.consumers.sinks import Sink, SinkBatch, TableSink
from rlmesh_stream.schemas.connection.config import StreamConfig


class _PreparingSink(Sink):
    """A sink whose `prepare` raises what it is given (nothing is stored)."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def load_offsets(self, builder: str) -> dict[TP, int]:
        return {}

    def apply(self, batch: SinkBatch) -> None:
        raise AssertionError("not called here")

    def close(self) -> None:
        pass

    def prepare(self) -> None:
        raise self.error


def _runtime(sink: Sink) -> ConsumerRuntime:
    # a bootstrap nothing listens on: a runtime that is not run connects nowhere
    return ConsumerRuntime(StreamConfig(bootstrap="127.0.0.1:1"), [EpisodesBuilder()], sink,
                           RuntimeOptions(group_id="g"))


def test_table_and_dataset_sinks_both_implement_the_contract() -> None:
    assert issubclass(TableSink, Sink)
    assert issubclass(DatasetSink, Sink)


def test_a_bug_in_a_sinks_prepare_is_not_swallowed() -> None:
    runtime = _runtime(_PreparingSink(AttributeError("no such attribute")))
    with pytest.raises(AttributeError, match="no such attribute"):
        runtime._prepare_sink()


def test_a_missing_module_in_prepare_is_left_to_the_first_batch(
        caplog: pytest.LogCaptureFixture) -> None:
    runtime = _runtime(_PreparingSink(ModuleNotFoundError("No module named 'pyarrow'")))
    with caplog.at_level(logging.DEBUG, logger="rlmesh_stream.consumers.runtime.core"):
        runtime._prepare_sink()
    assert "warm-up of the sink failed: No module named 'pyarrow'" in caplog.text


def test_a_sink_that_stores_no_group_offsets_says_it_cannot_tell() -> None:
    # the stop rule of a member holding no partition then waits for the group to settle
    assert _PreparingSink(OSError()).group_offsets() is None

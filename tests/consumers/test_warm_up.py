"""What a consumer prepares while its group is joined: the reader of each topic's
projection for the schema its producers most likely write with (the subject's latest),
so the first records read are not the ones that wait for the registry; and, once an
assignment has records to read, the sink's staging (never in a run that has none)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient

from rlmesh_stream.consumers.builders import EpisodesBuilder
from rlmesh_stream.consumers.runtime import ConsumerRuntime, RuntimeOptions
from rlmesh_stream.consumers.sinks import open_sink
from rlmesh_stream.schemas.codec import wire
from rlmesh_stream.schemas.connection.config import StreamConfig
from rlmesh_stream.schemas.contract import events as ev
from rlmesh_stream.schemas.contract.topics import EventType
from rlmesh_stream.schemas.registry.registrar import SchemaRegistrar
from tests.consumers.consumer_helpers import PlainKafkaHooks, create_topics, run_offline


def _runtime(config: StreamConfig, tmp_path: Path) -> Iterator[ConsumerRuntime]:
    sink = open_sink(f"duckdb://{tmp_path / 'store.duckdb'}")
    yield ConsumerRuntime(config, [EpisodesBuilder()], sink, RuntimeOptions(group_id="g"))
    sink.close()


@pytest.fixture
def runtime(stream_config: StreamConfig, tmp_path: Path) -> Iterator[ConsumerRuntime]:
    yield from _runtime(stream_config, tmp_path)


def test_each_topics_reader_for_its_latest_schema_is_made_ahead(
        runtime: ConsumerRuntime, stream_config: StreamConfig) -> None:
    registrar = SchemaRegistrar(SchemaRegistryClient(stream_config.registry_config()),
                                "avro", stream_config.topic_prefix)
    sid = registrar.schema_id(EventType.EPISODE_STARTED)
    runtime.decoders.warm_projectors()
    started = EventType.EPISODE_STARTED.topic(stream_config.topic_prefix)
    assert callable(runtime.decoders.projectors[started][wire.header(sid)])


def test_a_topic_whose_subject_is_not_registered_yet_is_skipped(
        runtime: ConsumerRuntime, stream_config: StreamConfig) -> None:
    runtime.decoders.warm_projectors()
    assert all(not readers for readers in runtime.decoders.projectors.values())


def test_a_registry_that_does_not_answer_is_left_to_the_first_record(
        stream_config: StreamConfig, tmp_path: Path) -> None:
    away = StreamConfig.from_env(env={}, bootstrap=stream_config.bootstrap,
                                 registry_url="http://127.0.0.1:1",
                                 topic_prefix=stream_config.topic_prefix)
    for runtime in _runtime(away, tmp_path):
        runtime.decoders.warm_projectors()  # no error: the first record's decode reports it
        assert all(not readers for readers in runtime.decoders.projectors.values())


def _prepared_in(config: StreamConfig, tmp_path: Path) -> bool:
    """Runs the sessions builder over the topics until their end: whether the sink's
    staging was prepared."""
    sink = open_sink(f"duckdb://{tmp_path / 'store.duckdb'}")
    prepared = threading.Event()
    sink.prepare = prepared.set  # type: ignore[method-assign]
    try:
        run_offline(config, "", ["sessions"], sink=sink)
    finally:
        sink.close()
    return prepared.wait(10)


def test_a_run_with_nothing_to_read_never_prepares_the_sinks_staging(
        stream_config: StreamConfig, tmp_path: Path) -> None:
    """pyarrow's import (~70 ms of CPU) on a thread held the GIL from the main thread of
    a run that had nothing to read."""
    create_topics(stream_config)
    assert not _prepared_in(stream_config, tmp_path)


def test_the_sinks_staging_is_prepared_once_an_assignment_has_records_to_read(
        stream_config: StreamConfig, tmp_path: Path) -> None:
    create_topics(stream_config)
    hooks = PlainKafkaHooks(stream_config)
    route = ev.RuntimeEnvContext(env_id="e", env_component_id="ec", model_component_id="m")
    hooks.publish(EventType.SESSION_STARTED,
                  ev.SessionStartedEvent(session_id="s-1", route=route, env_id="e"))
    hooks.flush()
    assert _prepared_in(stream_config, tmp_path)


def test_a_live_run_prepares_the_sinks_staging_while_it_joins(
        stream_config: StreamConfig, tmp_path: Path) -> None:
    """Live, records come at any moment: the first checkpoint must not wait for pyarrow."""
    create_topics(stream_config)
    sink = open_sink(f"duckdb://{tmp_path / 'store.duckdb'}")
    prepared = threading.Event()
    sink.prepare = prepared.set  # type: ignore[method-assign]
    runtime = ConsumerRuntime(stream_config, [EpisodesBuilder()], sink,
                              RuntimeOptions(group_id="g-live"))
    running = threading.Thread(target=runtime.run)
    running.start()
    try:
        assert prepared.wait(30)  # no record was published
    finally:
        runtime.stop()
        running.join(30)
        sink.close()

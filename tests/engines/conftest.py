"""Fixtures of the engine tests: one simulated fleet (plus a few deep records and a
producer with forged sequences) and one Flink job over it, per run.

The fleet goes through the producer's own hook onto the stack; `flink_rows` runs
the generated DDL (every topic's table, every consumer table's view) in a real local
PyFlink (`infra/flink.py`: its own venv, the connector jars from Maven Central)
as one bounded batch job, because each Flink start costs tens of seconds here.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.schema_registry import SchemaRegistryClient

from rlmesh_stream.consumers.flink import flink_views
from rlmesh_stream.consumers.flink.render import FlinkView, quote
from rlmesh_stream.infra.flink import FlinkArtifacts, run_sql
from rlmesh_stream.infra.topics import ensure_topics
from rlmesh_stream.producer.hooks import KafkaRuntimeHooks
from rlmesh_stream.producer.simulator import simulate_fleet
from rlmesh_stream.schemas.codec.serde import EventDecoder
from rlmesh_stream.schemas.connection.config import StreamConfig
from rlmesh_stream.schemas.contract import events as ev
from rlmesh_stream.schemas.contract.events import SpaceSpec
from rlmesh_stream.schemas.contract.topics import EVENT_TYPES, EventType
from rlmesh_stream.schemas.engines.flink import FlinkOptions, create_tables, table_name
from tests.contract_samples.examples import box_space, discrete_space, example
from tests.contract_samples.strategies import deep_meta_map
from tests.engines.iceberg_export import IcebergExport, export_to_iceberg
from tests.publishing import close_delivered


@dataclass(frozen=True)
class Decoded:
    """One Kafka record as the project's own decoder reads it."""

    partition: int
    offset: int
    timestamp_ms: int
    key: str
    headers: dict[str, bytes]
    event: Any


@pytest.fixture(scope="session")
def fleet_config(stack: Any) -> StreamConfig:
    """A simulated fleet on the stack under a prefix of its own: 4 sessions of 2 lanes,
    some failing (so some episodes are abandoned), and 2 lane-driven sessions, published
    by KafkaRuntimeHooks; then records of a forging producer (`FORGED`)."""
    config = StreamConfig.from_env(env={}, bootstrap=stack.bootstrap,
                                   registry_url=stack.registry_url,
                                   topic_prefix=f"t{uuid.uuid4().hex[:10]}.rlmesh.runtime")
    ensure_topics(config, partitions=2, replication_factor=1)
    hooks = KafkaRuntimeHooks(config=config)
    simulate_fleet(hooks, sessions=4, lanes=2, episodes=3, seed=7, failure_rate=0.5,
                   window_every=5, lane_driven=2)
    _publish_deep_shapes(hooks)
    close_delivered(hooks)
    _publish_forged_sequences(config)
    return config


# (headers, key) of copies of a log record whose delivery headers a forger wrote: a
# duplicate 0 (twice, and once as "-0"), 1 missing, then 2; a sequence that is no number
# and one above MAX_SEQUENCE (both invalid: left out); a version-1 producer at 3 (0-2
# missing); and a `rlmesh.ps` without a producer id (invalid as a sequence).
FORGED: tuple[dict[str, bytes], ...] = (
    {"rlmesh.ps": b"forger:0"}, {"rlmesh.ps": b"forger:0"}, {"rlmesh.ps": b"forger:-0"},
    {"rlmesh.ps": b"forger:2"}, {"rlmesh.ps": b"forger:x7"},
    {"rlmesh.ps": b"forger:99999999999999999999"}, {"rlmesh.ps": b"forger:0005"},
    {"rlmesh.producer_id": b"forger-v1", "rlmesh.seq": b"3"},
    {"rlmesh.ps": b"nocolon"},
)


def _publish_forged_sequences(config: StreamConfig) -> None:
    """Copies of one published log record's value, with `FORGED`'s headers."""
    topic = EventType.LOG.topic(config.topic_prefix)
    consumer = Consumer({**config.kafka_config(), "group.id": uuid.uuid4().hex,
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, 0), TopicPartition(topic, 1, 0)])
        msg = consumer.poll(10)
        assert msg is not None and msg.error() is None, "no log record to copy"
        value = msg.value()
    finally:
        consumer.close()
    producer = Producer(config.kafka_config())
    for i, headers in enumerate(FORGED):
        producer.produce(topic, value=value, key=f"forged-{i}".encode(),
                         headers=list(headers.items()))
    assert producer.flush(30) == 0


def _publish_deep_shapes(hooks: KafkaRuntimeHooks) -> None:
    """Events whose left-out fields are deep (the simulator's are shallow): MetaMaps 12
    dicts or lists down, a dict space holding a tuple space; the columns next to them
    must still read right."""
    completed = example(EventType.EPISODE_COMPLETED)
    assert isinstance(completed, ev.EpisodeCompletedEvent)
    completed.session_id = f"deep-{uuid.uuid4().hex[:8]}"
    completed.final_info = deep_meta_map(12) | {"flat": [1, 2.5, "x", b"\x00", True]}
    hooks.episode_completed(completed)
    step = example(EventType.STEP_COMPLETED)
    assert isinstance(step, ev.StepCompletedEvent)
    step.session_id = completed.session_id
    step.infos = deep_meta_map(12, container="list")
    hooks.step_completed(step)
    action = example(EventType.ACTION_RECEIVED)
    assert isinstance(action, ev.ActionReceivedEvent)
    action.session_id = completed.session_id
    space = SpaceSpec(shape=[], dtype="DATA_TYPE_UNSPECIFIED")
    space.dict.keys.extend(["pair", "scalar"])
    pair = space.dict.spaces.add()
    pair.tuple.spaces.extend([box_space(), discrete_space()])
    space.dict.spaces.append(discrete_space())
    action.action_space = space
    hooks.action_received(action)


@pytest.fixture(scope="session")
def decoded(fleet_config: StreamConfig) -> dict[EventType, list[Decoded]]:
    """Every record of every topic, decoded by rlmesh_stream.schemas.codec.serde.EventDecoder."""
    decoder = EventDecoder(SchemaRegistryClient(fleet_config.registry_config()))
    consumer = Consumer({**fleet_config.kafka_config(), "group.id": uuid.uuid4().hex,
                         "enable.auto.commit": False})
    out: dict[EventType, list[Decoded]] = {}
    try:
        for et in EVENT_TYPES:
            topic = et.topic(fleet_config.topic_prefix)
            parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
            ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p))[1]
                    for p in parts}
            consumer.assign([TopicPartition(topic, p, 0) for p in parts])
            records: list[Decoded] = []
            while len(records) < sum(ends.values()):
                msg = consumer.poll(10)
                assert msg is not None, f"{topic}: fewer records than its end offsets"
                assert msg.error() is None, msg.error()
                records.append(Decoded(msg.partition(), msg.offset(), msg.timestamp()[1],
                                       msg.key().decode(), dict(msg.headers() or []),
                                       decoder.decode(msg.value())))
            out[et] = records
    finally:
        consumer.close()
    return out


@pytest.fixture(scope="session")
def flink_rows(fleet_config: StreamConfig, tmp_path_factory: pytest.TempPathFactory
               ) -> Iterator[dict[str, list[dict[str, Any]]]]:
    """What Flink reads with the generated DDL: every topic's table, and every view."""
    flink = FlinkArtifacts.from_env()
    flink.ensure()  # a no-op when `rlmesh-stream infra fetch --flink` ran (.ci/run)
    options = FlinkOptions(fleet_config.bootstrap, fleet_config.registry_url,
                           fleet_config.topic_prefix, bounded=True)
    views = flink_views()
    statements = [*create_tables(options).values(), *(v.create_sql() for v in views.values())]
    queries = {table_name(et): f"SELECT * FROM `{table_name(et)}`" for et in EVENT_TYPES}
    queries.update({f"view_{name}": view_query(view) for name, view in views.items()})
    yield run_sql(flink, [s.rstrip().rstrip(";") for s in statements], queries,
                  Path(tmp_path_factory.mktemp("flink")))


def view_query(view: FlinkView) -> str:
    """Every column of the view; DECIMALs as text (JSON numbers would be read as floats)."""
    return "SELECT " + ", ".join(
        f"CAST({quote(c.name)} AS STRING) AS {quote(c.name)}" if c.type == "DECIMAL"
        else quote(c.name) for c in view.columns) + f" FROM {quote(view.name)}"


@pytest.fixture(scope="session")
def iceberg_export(fleet_config: StreamConfig, tmp_path_factory: pytest.TempPathFactory
                   ) -> IcebergExport:
    """The fleet exported once into Iceberg tables, for every engine that reads them."""
    pytest.importorskip("pyiceberg")
    return export_to_iceberg(fleet_config, tmp_path_factory.mktemp("iceberg"))

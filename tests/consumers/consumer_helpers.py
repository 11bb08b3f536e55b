"""Helpers of the consumer tests: topics, a plain publishing hooks object, offline runs.

`PlainKafkaHooks` publishes what the simulator emits exactly as the contract
says (Confluent-framed value from `EventSerializer`, key = session id, the
`rlmesh_stream.schemas.contract.headers` headers with a per-producer sequence) through a plain
`confluent_kafka.Producer`, so the consumer tests depend on the contract, not
on the producer package's internals.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient

from rlmesh_stream.consumers.builders import make_builders
from rlmesh_stream.consumers.runtime import CheckpointInfo, ConsumerRuntime, RuntimeOptions
from rlmesh_stream.consumers.sinks import TableSink, open_sink
from rlmesh_stream.infra.topics import ensure_topics
from rlmesh_stream.schemas.codec.serde import EventSerializer
from rlmesh_stream.schemas.connection.config import StreamConfig
from rlmesh_stream.schemas.contract import events as ev
from rlmesh_stream.schemas.contract import headers as h
from rlmesh_stream.schemas.contract.topics import EventType

_CALLBACKS = {et.value: et for et in EventType} | {"on_telemetry": EventType.TELEMETRY_SNAPSHOT}


def create_topics(config: StreamConfig, partitions: int = 4) -> None:
    ensure_topics(config, partitions=partitions, replication_factor=1)


class PlainKafkaHooks:
    """The runtime callbacks, each publishing its event to its topic."""

    def __init__(self, config: StreamConfig, *, drop_leaves: bool = True,
                 producer_id: str | None = None, transactional: bool = False) -> None:
        """`transactional`: a transactional producer (as a Kafka Streams or Flink job
        writing exactly once has), its transactions begun and ended through `producer`."""
        self.config = config
        self.serializer = EventSerializer(SchemaRegistryClient(config.registry_config()),
                                          topic_prefix=config.topic_prefix)
        self.producer = Producer({**config.kafka_config(), "linger.ms": 20,
                                  "enable.idempotence": True,
                                  "queue.buffering.max.messages": 1_000_000,
                                  **({"transactional.id": f"tx-{uuid.uuid4().hex}"}
                                     if transactional else {})})
        if transactional:
            self.producer.init_transactions(30)
        self.drop_leaves = drop_leaves
        self.producer_id = producer_id or uuid.uuid4().hex
        self.seq = 0
        self.sent: list[tuple[EventType, Any]] = []

    def __getattr__(self, name: str) -> Any:
        if name not in _CALLBACKS:
            raise AttributeError(name)
        et = _CALLBACKS[name]
        return lambda event: self.publish(et, event)

    def publish(self, et: EventType, event: Any, *, seq: int | None = None,
                timestamp: int = 0) -> None:
        if self.drop_leaves:  # small events: the payload leaves are not what is tested
            if isinstance(event, ev.ObservationEmittedEvent):
                event.observation = event.raw_observation = None
            elif isinstance(event, ev.ActionReceivedEvent):
                event.action = event.raw_action = None
        self.produce_raw(et, event.session_id, self.serializer.serialize(event), seq=seq,
                         timestamp=timestamp)
        self.sent.append((et, event))

    def produce_raw(self, et: EventType, key: str, value: bytes, *,
                    seq: int | None = None, timestamp: int = 0) -> None:
        """`timestamp`: the record's, in ms (0: now)."""
        number = self.seq if seq is None else seq
        if seq is None:
            self.seq += 1
        # Version 1 of the contract's headers (the hook writes version 2; consumers read both).
        headers = [(h.EVENT_TYPE, et.value.encode()), (h.CONTRACT, b"1"),
                   (h.PRODUCER_ID, self.producer_id.encode()), (h.SEQUENCE, str(number).encode())]
        while True:
            try:
                self.producer.produce(et.topic(self.config.topic_prefix), key=key.encode(),
                                      value=value, headers=headers, timestamp=timestamp)
                break
            except BufferError:
                self.producer.poll(0.05)
        self.producer.poll(0)

    def flush(self) -> None:
        assert self.producer.flush(60) == 0


def run_offline(config: StreamConfig, sink_url: str, builders: Iterable[str] = ("all",), *,
                group_id: str | None = None, sink: TableSink | None = None,
                on_checkpoint: Any = None, **options: Any) -> ConsumerRuntime:
    """Run builders in this process from the beginning until the end, as `--until-end`."""
    store = sink or open_sink(sink_url)
    names = list(builders)
    runtime = ConsumerRuntime(
        config, make_builders(names, steps=options.pop("steps", False)), store,
        RuntimeOptions(group_id=group_id or f"g-{uuid.uuid4().hex[:8]}", from_beginning=True,
                       until_end=True, **options),
        on_checkpoint=on_checkpoint)
    try:
        runtime.run()
    finally:
        if sink is None:
            store.close()
    return runtime


def query(sink_url: str, sql: str) -> list[tuple[Any, ...]]:
    store = open_sink(sink_url)
    try:
        return store.query(sql)
    finally:
        store.close()


__all__ = ["CheckpointInfo", "PlainKafkaHooks", "create_topics", "query", "run_offline"]


# Every table `consume all` writes, with the columns a run's result is (consumer_offsets
# without its timestamps): two runs over the same records give equal snapshots.
ALL_TABLES = {
    "episodes": "*", "episode_session_ends": "*", "sessions": "*", "advisories": "*",
    "telemetry_rollups": "*", "telemetry_sessions": "*", "delivery_sequences": "*",
    "consumer_offsets": "builder, topic, partition_id, next_offset",
}


def snapshot(sink_url: str) -> dict[str, list[str]]:
    """Every table of `ALL_TABLES`, its rows as sorted reprs (compared run against run)."""
    return {t: sorted(repr(r) for r in query(sink_url, f"SELECT {cols} FROM {t}"))
            for t, cols in ALL_TABLES.items()}

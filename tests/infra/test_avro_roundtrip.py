"""The stack speaks the Confluent APIs end to end: registry, Avro framing, Kafka."""

from __future__ import annotations

import json
import time

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from rlmesh_stream.schemas.connection.config import StreamConfig
from rlmesh_stream.schemas.contract.topics import confluent_serde_conf

STEP_SCHEMA = json.dumps({
    "type": "record", "name": "Step", "namespace": "rlmesh.test",
    "fields": [
        {"name": "session_id", "type": "string"},
        {"name": "step", "type": "long"},
        {"name": "reward", "type": "double"},
        {"name": "observation", "type": "bytes"},
    ],
})


def test_avro_record_round_trips_through_registry_and_kafka(stream_config: StreamConfig) -> None:
    topic = f"{stream_config.topic_prefix}.step_completed"
    admin = AdminClient(stream_config.kafka_config())
    admin.create_topics([NewTopic(topic, num_partitions=3)])[topic].result(30)
    registry = SchemaRegistryClient(stream_config.registry_config())
    schema_id = registry.register_schema(f"{topic}-value", Schema(STEP_SCHEMA, "AVRO"))
    ctx = SerializationContext(topic, MessageField.VALUE)
    record = {"session_id": "s-1", "step": 7, "reward": 0.5, "observation": bytes(range(256))}

    producer = Producer(stream_config.kafka_config())
    serialize = AvroSerializer(registry, STEP_SCHEMA, conf=confluent_serde_conf())
    producer.produce(topic, key=b"s-1", value=serialize(record, ctx))
    assert producer.flush(30) == 0

    consumer = Consumer({**stream_config.kafka_config(), "group.id": f"{topic}.reader",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    try:
        msg = None
        deadline = time.monotonic() + 30
        while msg is None and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
    finally:
        consumer.close()

    assert msg is not None and msg.error() is None
    payload = msg.value()
    assert payload is not None
    assert int.from_bytes(payload[1:5], "big") == schema_id  # Confluent wire framing
    fresh_registry = SchemaRegistryClient(stream_config.registry_config())
    assert AvroDeserializer(fresh_registry, conf=confluent_serde_conf())(payload, ctx) == record

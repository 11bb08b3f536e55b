"""`rlmesh-stream infra smoke`: prove the stack works end to end with one record.

Registers an Avro schema through the Confluent-API registry, produces one record
with the schema-id framing (AvroSerializer) and reads it back (AvroDeserializer).
It is the job `make demo` runs until the real demo exists, and the quickest way to
check a cluster and registry someone points us at.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from typing import Any

from rlmesh_stream.schemas.connection.client_errors import ClientErrors
from rlmesh_stream.schemas.connection.config import StreamConfig
from rlmesh_stream.schemas.connection.redact import redact_secrets
from rlmesh_stream.schemas.contract.errors import RegistryProtocolError, RegistryUnavailableError
from rlmesh_stream.schemas.contract.topics import confluent_serde_conf
from rlmesh_stream.schemas.errors import RlmeshStreamError
from rlmesh_stream.schemas.registry.client import call as registry_call

SMOKE_SCHEMA = json.dumps({
    "type": "record", "name": "SmokeRecord", "namespace": "rlmesh.stream.smoke",
    "fields": [
        {"name": "id", "type": "string"},
        {"name": "sent_at_ms", "type": "long"},
        {"name": "note", "type": ["null", "string"], "default": None},
    ],
})


class SmokeError(RlmeshStreamError):
    """A step of the smoke test failed; the message names the step, the server and why."""


@dataclass(frozen=True)
class SmokeResult:
    topic: str
    subject: str
    schema_id: int
    sent: dict[str, Any]
    received: dict[str, Any]
    seconds: float


def run_smoke(config: StreamConfig, timeout: float = 30.0) -> SmokeResult:
    """Register, produce, consume one record on `<prefix>.smoke`; raise if anything fails."""
    from confluent_kafka import Consumer, KafkaException, Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
    from confluent_kafka.schema_registry.error import SchemaRegistryError
    from confluent_kafka.serialization import MessageField, SerializationContext

    started = time.monotonic()
    topic = f"{config.topic_prefix}.smoke"
    subject = f"{topic}-value"
    errors = ClientErrors()
    admin = AdminClient({**config.kafka_config(), **errors.config()})
    future = admin.create_topics([NewTopic(topic, num_partitions=1)],
                                 request_timeout=timeout)[topic]
    try:
        future.result(timeout)
    except KafkaException as exc:
        if "TOPIC_ALREADY_EXISTS" not in str(exc):
            admin.poll(0)  # serves the queued client errors: the last one says why
            raise SmokeError(f"cannot create {topic} on Kafka at {config.bootstrap}: "
                             f"{errors.explain(str(exc.args[0] if exc.args else exc))}"
                             ) from exc

    registry = SchemaRegistryClient(config.registry_config())
    try:
        schema_id = registry_call(f"register {subject}", registry.register_schema, subject,
                                  Schema(SMOKE_SCHEMA, "AVRO"))
    except (RegistryUnavailableError, RegistryProtocolError, SchemaRegistryError) as exc:
        raise SmokeError(redact_secrets(f"schema registry at {config.registry_url}: {exc}",
                                        config.registry_url)) from exc
    ctx = SerializationContext(topic, MessageField.VALUE)
    record_id = uuid.uuid4().hex
    record: dict[str, Any] = {"id": record_id, "sent_at_ms": int(time.time() * 1000),
                              "note": "smoke"}
    payload = AvroSerializer(registry, SMOKE_SCHEMA, conf=confluent_serde_conf())(record, ctx)

    producer = Producer(config.kafka_config())
    producer.produce(topic, key=record_id.encode(), value=payload)
    if producer.flush(timeout) != 0:
        raise RuntimeError(f"the record to {topic} was not delivered within {timeout} s")

    consumer = Consumer({**config.kafka_config(), "group.id": f"smoke-{record_id}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    deserialize = AvroDeserializer(registry, conf=confluent_serde_conf())
    received: dict[str, Any] | None = None
    deadline = time.monotonic() + timeout
    try:
        while received is None and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            if msg.error():
                raise KafkaException(msg.error())
            value = deserialize(msg.value(), ctx)
            if value and value.get("id") == record_id:
                received = value
    finally:
        consumer.close()
    if received is None:
        raise RuntimeError(f"the record written to {topic} was not read back within {timeout} s")
    return SmokeResult(topic, subject, schema_id, record, received,
                       round(time.monotonic() - started, 2))

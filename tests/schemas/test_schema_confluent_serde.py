"""confluent-kafka's own serializers, set up with `confluent_serde_conf`, read our subjects."""

from __future__ import annotations

import json
from typing import Any

from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from rlmesh_stream.schemas.connection.config import StreamConfig
from rlmesh_stream.schemas.contract.topics import confluent_serde_conf

SCHEMA = json.dumps({"type": "record", "name": "Probe", "namespace": "rlmesh.test",
                     "fields": [{"name": "n", "type": "long"}]})


class NoAssociations(SchemaRegistryClient):
    """A registry client that fails the test if the associations API is asked."""

    def get_associations_by_resource_name(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the associations API was asked (Apicurio has none)")


def test_the_serde_conf_names_topic_subjects_without_asking_the_associations_api(
    stream_config: StreamConfig,
) -> None:
    client = NoAssociations(stream_config.registry_config())
    topic = f"{stream_config.topic_prefix}.probe"
    ctx = SerializationContext(topic, MessageField.VALUE)

    payload = AvroSerializer(client, SCHEMA, conf=confluent_serde_conf())({"n": 7}, ctx)

    assert AvroDeserializer(client, conf=confluent_serde_conf())(payload, ctx) == {"n": 7}
    assert client.get_latest_version(f"{topic}-value").schema.schema_str is not None

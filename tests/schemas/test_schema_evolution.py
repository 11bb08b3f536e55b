"""Schema evolution on the real registry under BACKWARD compatibility.

v2 of `LogEvent` adds an optional field. It registers after v1; our decoder
(the v1 reader) reads v2 records; a v2 reader reads v1 records; and an
incompatible change is refused, by the registry and by `schemas check`.
"""

from __future__ import annotations

import io
import json

import fastavro
import pytest
from click.testing import CliRunner
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from rlmesh_stream.infra.schemas_cli import schemas as schemas_cli
from rlmesh_stream.schemas.codec.serde import EventDecoder, EventEncoder, EventSerializer, frame
from rlmesh_stream.schemas.contract.avro import load_schema
from rlmesh_stream.schemas.contract.topics import EventType, subject_name
from tests.contract_samples.examples import example

pytestmark = pytest.mark.stack


@pytest.fixture
def registry(stream_config):
    return SchemaRegistryClient(stream_config.registry_config())


def _v2() -> dict:
    schema = load_schema(EventType.LOG)
    schema["fields"].append({
        "name": "thread", "type": ["null", "string"], "default": None,
        "doc": "v2: the runtime thread that logged the line."})
    return schema


def _subject(stream_config) -> str:
    return subject_name(EventType.LOG.topic(stream_config.topic_prefix))


def _register_v1_then_v2(registry, stream_config) -> tuple[int, int]:
    v1 = EventSerializer(registry, topic_prefix=stream_config.topic_prefix).registrar
    v1_id = v1.schema_id(EventType.LOG)
    v2_id = registry.register_schema(_subject(stream_config), Schema(json.dumps(_v2()), "AVRO"))
    return v1_id, v2_id


def test_v2_with_an_added_optional_field_registers_under_backward(registry, stream_config):
    v1_id, v2_id = _register_v1_then_v2(registry, stream_config)
    assert (registry.get_compatibility(_subject(stream_config)), v2_id != v1_id) == (
        "BACKWARD", True)


def test_v1_reader_reads_v2_records(registry, stream_config):
    _, v2_id = _register_v1_then_v2(registry, stream_config)
    event = example(EventType.LOG)
    record = {**_avro_record(event), "thread": "worker-3"}
    payload = io.BytesIO()
    fastavro.schemaless_writer(payload, fastavro.parse_schema(_v2()), record)
    assert EventDecoder(registry).decode(frame(v2_id, payload.getvalue())) == event


def test_v2_reader_reads_v1_records(registry, stream_config):
    _register_v1_then_v2(registry, stream_config)
    event = example(EventType.LOG)
    value = EventSerializer(registry, topic_prefix=stream_config.topic_prefix).serialize(event)
    writer = json.loads(registry.get_schema(int.from_bytes(value[1:5], "big")).schema_str)
    record = fastavro.schemaless_reader(io.BytesIO(value[5:]), fastavro.parse_schema(writer),
                                        fastavro.parse_schema(_v2()))
    assert record == {**_avro_record(event), "thread": None}


def test_registry_refuses_a_v2_that_adds_a_required_field(registry, stream_config):
    _register_v1_then_v2(registry, stream_config)
    bad = load_schema(EventType.LOG)
    bad["fields"].append({"name": "pid", "type": "long", "doc": "no default: incompatible"})
    with pytest.raises(SchemaRegistryError) as info:
        registry.register_schema(_subject(stream_config), Schema(json.dumps(bad), "AVRO"))
    assert info.value.http_status_code == 409


def test_schemas_check_fails_naming_subject_and_field_when_the_registry_diverged(
        registry, stream_config):
    # The registry holds a LogEvent without `message`: our schema needs it and
    # has no default for it, so it cannot read what the subject holds.
    diverged = load_schema(EventType.LOG)
    diverged["fields"] = [f for f in diverged["fields"] if f["name"] != "message"]
    registry.register_schema(_subject(stream_config), Schema(json.dumps(diverged), "AVRO"))
    result = CliRunner().invoke(schemas_cli, ["check", *_connection(stream_config)])
    assert result.exit_code == 1
    assert f"{_subject(stream_config)}: LogEvent.message" in result.output


def test_schemas_check_passes_after_a_compatible_v2(registry, stream_config):
    _register_v1_then_v2(registry, stream_config)
    result = CliRunner().invoke(schemas_cli, ["check", *_connection(stream_config)])
    assert (result.exit_code, f"{_subject(stream_config)}\tcompatible" in result.output) == (
        0, True)


def test_schemas_check_fails_naming_a_version_our_consumers_cannot_read_under_none(
        registry, stream_config):
    # Compatibility NONE lets the registry take anything, and its test then says compatible;
    # the consumers' reader cannot read a string step_count, so check must say so.
    subject = subject_name(EventType.EPISODE_COMPLETED.topic(stream_config.topic_prefix))
    EventSerializer(registry, topic_prefix=stream_config.topic_prefix).registrar.schema_id(
        EventType.EPISODE_COMPLETED)
    registry.set_compatibility(subject_name=subject, level="NONE")
    retyped = load_schema(EventType.EPISODE_COMPLETED)
    for f in retyped["fields"]:
        if f["name"] == "step_count":
            f["type"] = "string"
    version = registry.register_schema(subject, Schema(json.dumps(retyped), "AVRO"))
    assert version
    result = CliRunner().invoke(schemas_cli, ["check", *_connection(stream_config)])
    assert result.exit_code == 1
    assert f"{subject}: version 2: EpisodeCompletedEvent.step_count" in result.output


def _connection(stream_config) -> list[str]:
    return ["--registry-url", stream_config.registry_url,
            "--topic-prefix", stream_config.topic_prefix]


def _avro_record(event) -> dict:
    """The Avro record of a LogEvent, written out by hand as an independent oracle."""
    r = event.route
    return {
        "session_id": event.session_id,
        "route": {"env_id": r.env_id, "env_component_id": r.env_component_id,
                  "model_component_id": r.model_component_id, "lane": r.lane},
        "level": event.level.name, "message": event.message, "source": event.source,
    }


def _proto_v2_registered(registry, stream_config) -> int:
    from rlmesh_stream.schemas.registry.proto_defs import proto_text, references
    from rlmesh_stream.schemas.registry.registrar import SchemaRegistrar

    SchemaRegistrar(registry, "protobuf", stream_config.topic_prefix).schema_id(EventType.LOG)
    v2 = proto_text(EventType.LOG).replace(
        "  optional string source = 5;\n",
        "  optional string source = 5;\n  optional string thread = 6;\n")
    return registry.register_schema(_subject(stream_config),
                                    Schema(v2, "PROTOBUF", references(registry, EventType.LOG)))


def test_protobuf_v2_with_an_added_optional_field_registers_under_backward(registry,
                                                                           stream_config):
    assert _proto_v2_registered(registry, stream_config) > 0


def test_protobuf_v1_reader_reads_v2_records(registry, stream_config):
    v2_id = _proto_v2_registered(registry, stream_config)
    event = example(EventType.LOG)
    # a v2 writer's bytes: v1's fields plus field 6 (`thread`, a string)
    payload = EventEncoder("protobuf").encode(event) + b"\x32\x08worker-3"
    value = frame(v2_id, payload, "protobuf")
    assert EventDecoder(registry).decode(value) == event


def test_registry_refuses_a_protobuf_field_retyped(registry, stream_config):
    from rlmesh_stream.schemas.registry.proto_defs import proto_text, references

    _proto_v2_registered(registry, stream_config)
    bad = proto_text(EventType.LOG).replace("string message = 4;", "int64 message = 4;")
    with pytest.raises(SchemaRegistryError) as info:
        registry.register_schema(_subject(stream_config),
                                 Schema(bad, "PROTOBUF", references(registry, EventType.LOG)))
    assert info.value.http_status_code == 409


def test_a_leg_this_reader_does_not_know_decodes_as_unknown_in_avro(registry, stream_config):
    from rlmesh_stream.schemas.contract.events import Leg

    EventSerializer(registry, topic_prefix=stream_config.topic_prefix).registrar.schema_id(
        EventType.RELAY_ADVISORY)
    v2 = load_schema(EventType.RELAY_ADVISORY)
    leg = next(f for f in v2["fields"] if f["name"] == "leg")["type"]
    leg["symbols"].append("BOTH")
    subject = subject_name(EventType.RELAY_ADVISORY.topic(stream_config.topic_prefix))
    v2_id = registry.register_schema(subject, Schema(json.dumps(v2), "AVRO"))
    event = example(EventType.RELAY_ADVISORY)
    route = _avro_record(example(EventType.LOG))["route"]
    record = {"session_id": event.session_id, "route": route, "leg": "BOTH",
              "advisory": {"severity": "CAUTION", "message": event.advisory.message}}
    payload = io.BytesIO()
    fastavro.schemaless_writer(payload, fastavro.parse_schema(v2), record)
    assert EventDecoder(registry).decode(frame(v2_id, payload.getvalue())).leg is Leg.UNKNOWN


def test_a_leg_this_reader_does_not_know_decodes_as_unknown_in_protobuf(registry,
                                                                        stream_config):
    from rlmesh_stream.schemas.contract.events import Leg
    from rlmesh_stream.schemas.registry.proto_defs import message_class
    from rlmesh_stream.schemas.registry.registrar import SchemaRegistrar

    sid = SchemaRegistrar(registry, "protobuf", stream_config.topic_prefix).schema_id(
        EventType.RELAY_ADVISORY)
    msg = message_class(EventType.RELAY_ADVISORY).FromString(
        EventEncoder("protobuf").encode(example(EventType.RELAY_ADVISORY)))
    msg.leg = 7  # a direction added by a newer rlmesh (open enum)
    value = frame(sid, msg.SerializeToString(), "protobuf")
    assert EventDecoder(registry).decode(value).leg is Leg.UNKNOWN

"""`rlmesh-stream schemas register|check|catalog` against the real registry."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from confluent_kafka.schema_registry import SchemaRegistryClient

from rlmesh_stream.infra.schemas_cli import schemas as schemas_cli
from rlmesh_stream.schemas.contract.topics import EVENT_TYPES, EventType, subject_name


def _connection(stream_config) -> list[str]:
    return ["--registry-url", stream_config.registry_url,
            "--topic-prefix", stream_config.topic_prefix]


@pytest.mark.stack
@pytest.mark.parametrize("fmt", ["avro", "protobuf"])
def test_register_creates_every_subject_with_backward_compatibility(stream_config, fmt):
    result = CliRunner().invoke(schemas_cli, ["register", "--format", fmt,
                                              *_connection(stream_config)])
    client = SchemaRegistryClient(stream_config.registry_config())
    subjects = [subject_name(et.topic(stream_config.topic_prefix)) for et in EVENT_TYPES]
    assert (result.exit_code, [client.get_compatibility(s) for s in subjects]) == (
        0, ["BACKWARD"] * len(subjects))


@pytest.mark.stack
def test_register_twice_returns_the_same_ids(stream_config):
    runner = CliRunner()
    first = runner.invoke(schemas_cli, ["register", *_connection(stream_config)])
    second = runner.invoke(schemas_cli, ["register", *_connection(stream_config)])
    assert (first.exit_code, second.exit_code, first.output) == (0, 0, second.output)


@pytest.mark.stack
@pytest.mark.parametrize("fmt", ["avro", "protobuf"])
def test_check_after_register_reports_every_subject_current(stream_config, fmt):
    runner = CliRunner()
    runner.invoke(schemas_cli, ["register", "--format", fmt, *_connection(stream_config)])
    result = runner.invoke(schemas_cli, ["check", "--format", fmt, *_connection(stream_config)])
    assert (result.exit_code, result.output.count("\tcurrent")) == (0, len(EVENT_TYPES))


@pytest.mark.stack
def test_check_on_an_empty_registry_prefix_reports_not_registered(stream_config):
    result = CliRunner().invoke(schemas_cli, ["check", *_connection(stream_config)])
    assert (result.exit_code, result.output.count("\tnot registered")) == (0, len(EVENT_TYPES))


@pytest.mark.stack
def test_check_fails_naming_the_protobuf_field_whose_type_changed(stream_config):
    from confluent_kafka.schema_registry import Schema

    from rlmesh_stream.schemas.registry.proto_defs import proto_text, references

    client = SchemaRegistryClient(stream_config.registry_config())
    refs = references(client, EventType.SESSION_ENDED)
    diverged = proto_text(EventType.SESSION_ENDED).replace("int64 total_steps = 4;",
                                                           "string total_steps = 4;")
    client.register_schema(subject_name(EventType.SESSION_ENDED.topic(stream_config.topic_prefix)),
                           Schema(diverged, "PROTOBUF", refs))
    result = CliRunner().invoke(schemas_cli, ["check", "--format", "protobuf",
                                              *_connection(stream_config)])
    assert result.exit_code == 1
    assert "SessionEndedEvent.total_steps (field 4)" in result.output


def test_register_reports_an_unreachable_registry_without_a_traceback():
    result = CliRunner().invoke(schemas_cli, ["register", "--registry-url",
                                              "http://127.0.0.1:9/apis/ccompat/v7"])
    assert result.exit_code == 1 and "unreachable" in result.output


def test_catalog_check_passes_on_the_committed_catalog():
    result = CliRunner().invoke(schemas_cli, ["catalog", "--check"])
    assert result.exit_code == 0, result.output

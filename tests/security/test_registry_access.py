"""The schema registry behind the TLS + basic-auth proxy, against the real Apicurio.

`producer` may read and register the event subjects, `consumer` may only
read; errors are in the Confluent format and name the user and the request.
"""

from __future__ import annotations

import dataclasses
import ssl

import httpx2 as httpx
import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from rlmesh_stream.infra.registry import CCOMPAT_PATH
from rlmesh_stream.infra.security import SecureStack
from rlmesh_stream.schemas.connection.config import StreamConfig

pytestmark = pytest.mark.timeout(120)

STRING = Schema('"string"', "AVRO")


def client(config: StreamConfig) -> SchemaRegistryClient:
    return SchemaRegistryClient(config.registry_config())


def test_the_producer_registers_an_event_subject(secure_stack: SecureStack) -> None:
    config = secure_stack.config_for("producer")
    sid = client(config).register_schema(f"{config.topic_prefix}.probe-value", STRING)
    assert client(secure_stack.config_for("consumer")).get_schema(sid).schema_str == '"string"'


def test_the_producer_may_not_register_outside_the_event_subjects(
    secure_stack: SecureStack,
) -> None:
    with pytest.raises(SchemaRegistryError, match="registry user 'producer' may not POST "
                       f"{CCOMPAT_PATH}/subjects/another-team.orders-value/versions") as exc:
        client(secure_stack.config_for("producer")).register_schema(
            "another-team.orders-value", STRING)
    assert exc.value.http_status_code == 403


def test_the_consumer_may_not_register(secure_stack: SecureStack) -> None:
    config = secure_stack.config_for("consumer")
    with pytest.raises(SchemaRegistryError, match="registry user 'consumer' may not POST "):
        client(config).register_schema(f"{config.topic_prefix}.log-value", STRING)


def test_nobody_may_delete_a_subject(secure_stack: SecureStack) -> None:
    config = secure_stack.config_for("producer")
    with pytest.raises(SchemaRegistryError, match="registry user 'producer' may not DELETE "):
        client(config).delete_subject(f"{config.topic_prefix}.log-value")


def test_a_wrong_registry_password_is_refused_naming_the_user(
    secure_stack: SecureStack,
) -> None:
    config = dataclasses.replace(secure_stack.config_for("consumer"),
                                 registry_password="not-the-password")
    with pytest.raises(SchemaRegistryError,
                       match="registry authentication failed for user 'consumer'") as exc:
        client(config).get_subjects()
    assert exc.value.http_status_code == 401
    assert "not-the-password" not in str(exc.value)


def test_a_request_without_credentials_is_refused(secure_stack: SecureStack) -> None:
    config = secure_stack.config_for("consumer")
    response = httpx.get(f"{config.registry_url}/subjects",
                         verify=ssl.create_default_context(cafile=config.registry_ca_location))
    assert response.status_code == 401


def test_the_registry_is_served_only_over_tls(secure_stack: SecureStack) -> None:
    config = secure_stack.config_for("consumer")
    plain = config.registry_url.replace("https://", "http://")
    response = httpx.get(f"{plain}/subjects", auth=(config.registry_username or "",
                                                    config.registry_password or ""))
    assert response.status_code == 400  # nginx: "plain HTTP request sent to HTTPS port"


def test_the_registry_certificate_is_checked(secure_stack: SecureStack) -> None:
    config = dataclasses.replace(secure_stack.config_for("consumer"),
                                 registry_ca_location=None)
    with pytest.raises(Exception, match=r"CERTIFICATE_VERIFY_FAILED|certificate verify failed"):
        client(config).get_subjects()

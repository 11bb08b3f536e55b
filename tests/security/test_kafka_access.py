"""Kafka over SASL_SSL with SCRAM-SHA-512 users and ACLs, against a real secured broker.

`producer` may write the event topics and nothing else, `consumer` may read
them with a `rlmesh-stream*` group; a wrong password or a missing ACL is a
clear error that names the principal and the resource, never a silent stall.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import uuid
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from rlmesh_stream.consumers.builders import make_builders
from rlmesh_stream.consumers.runtime import ConsumerRuntime, RuntimeOptions
from rlmesh_stream.consumers.sinks import open_sink
from rlmesh_stream.infra.security import SecureStack
from rlmesh_stream.producer.delivery import Stats
from rlmesh_stream.producer.hooks import KafkaRuntimeHooks
from rlmesh_stream.producer.manifest import Manifest
from rlmesh_stream.producer.simulator import simulate_fleet
from rlmesh_stream.schemas.connection.access import AccessDeniedError
from rlmesh_stream.schemas.connection.config import StreamConfig
from rlmesh_stream.schemas.contract.topics import EventType

pytestmark = pytest.mark.timeout(300)


def publish(config: StreamConfig, sessions: int = 3) -> tuple[Stats, Manifest]:
    hooks = KafkaRuntimeHooks(config=config, install_exit_handlers=False, startup_wait_s=15)
    manifest = simulate_fleet(hooks, sessions=sessions, episodes=2, seed=3)
    return hooks.close(20), manifest


def consume(config: StreamConfig, sink_path: Path, group: str) -> ConsumerRuntime:
    sink = open_sink(f"duckdb://{sink_path}")
    runtime = ConsumerRuntime(config, make_builders(["sessions"]), sink,
                              RuntimeOptions(group_id=group, from_beginning=True,
                                             until_end=True))
    try:
        runtime.run()
    finally:
        sink.close()
    return runtime


@pytest.fixture(scope="module")
def published(secure_stack: SecureStack) -> tuple[Stats, Manifest]:
    return publish(secure_stack.config_for("producer"))


def test_the_producer_principal_delivers_every_event_it_accepts(
    published: tuple[Stats, Manifest],
) -> None:
    stats, manifest = published
    assert stats.accepted == manifest.total_events > 0
    assert (stats.delivered, stats.failed, stats.dropped) == (stats.accepted, {}, 0)


def test_the_consumer_principal_builds_the_tables_from_them(
    secure_stack: SecureStack, published: tuple[Stats, Manifest], tmp_path: Path,
) -> None:
    _, manifest = published
    consume(secure_stack.config_for("consumer"), tmp_path / "t.duckdb",
            f"rlmesh-stream.sec-{uuid.uuid4().hex[:6]}")
    sink = open_sink(f"duckdb://{tmp_path / 't.duckdb'}")
    try:
        rows = sink.query("SELECT session_id FROM sessions ORDER BY 1")
    finally:
        sink.close()
    assert [r[0] for r in rows] == sorted(s.session_id for s in manifest.sessions)


def test_a_wrong_kafka_password_is_refused_naming_the_principal(
    secure_stack: SecureStack, caplog: pytest.LogCaptureFixture,
) -> None:
    config = dataclasses.replace(secure_stack.config_for("producer"),
                                 sasl_password="not-the-password")
    with caplog.at_level(logging.ERROR, logger="rlmesh_stream.producer.hooks"):
        stats, _ = publish(config, sessions=1)
    assert stats.delivered == 0
    assert (f"Kafka at {config.bootstrap} rejected the credentials of User:producer "
            "(SCRAM-SHA-512)") in caplog.text


def test_the_consumer_principal_may_not_write_the_event_topics(
    secure_stack: SecureStack, caplog: pytest.LogCaptureFixture,
) -> None:
    # Kafka as `consumer`, registry as `producer`: only Kafka's ACLs stand in the way.
    config = secure_stack.config_for("consumer", registry_user="producer")
    with caplog.at_level(logging.ERROR, logger="rlmesh_stream.producer.delivery"):
        stats, _ = publish(config, sessions=1)
    assert stats.delivered == 0
    assert set(stats.failed) == {"TOPIC_AUTHORIZATION_FAILED"}
    assert re.search(rf"denied User:consumer permission to write to topic "
                     rf"'{re.escape(config.topic_prefix)}\.[a-z_]+' \[TOPIC_AUTHORIZATION_FAILED\]",
                     caplog.text)


def test_the_producer_principal_may_not_consume(
    secure_stack: SecureStack, tmp_path: Path,
) -> None:
    with pytest.raises(AccessDeniedError, match=r"denied User:producer permission to read "
                       r"consumer group 'rlmesh-stream\.sessions'"):
        consume(secure_stack.config_for("producer"), tmp_path / "t.duckdb",
                "rlmesh-stream.sessions")


def test_the_consumer_principal_may_not_use_a_group_outside_its_prefix(
    secure_stack: SecureStack, tmp_path: Path,
) -> None:
    with pytest.raises(AccessDeniedError, match=r"denied User:consumer permission to read "
                       r"consumer group 'another-team\.sessions'"):
        consume(secure_stack.config_for("consumer"), tmp_path / "t.duckdb",
                "another-team.sessions")


def test_a_wrong_consumer_password_stops_the_consumer_naming_the_principal(
    secure_stack: SecureStack, tmp_path: Path,
) -> None:
    config = dataclasses.replace(secure_stack.config_for("consumer"), sasl_password="nope")
    with pytest.raises(AccessDeniedError, match="rejected the credentials of User:consumer"):
        consume(config, tmp_path / "t.duckdb", "rlmesh-stream.wrong")


def test_the_client_listener_refuses_a_connection_without_tls(
    secure_stack: SecureStack,
) -> None:
    config = secure_stack.config_for("consumer")
    admin = AdminClient({**dataclasses.replace(config, security_protocol="SASL_PLAINTEXT")
                        .kafka_config(), "log_level": 0})
    with pytest.raises(Exception, match=r"(?i)transport|timed out"):
        admin.list_topics(timeout=5)


def test_the_consumer_principal_sees_only_the_topics_it_may_read(
    secure_stack: SecureStack,
) -> None:
    admin = AdminClient({**secure_stack.config_for("consumer").kafka_config(), "log_level": 0})
    visible = set(admin.list_topics(timeout=10).topics)
    assert EventType.SESSION_STARTED.topic(secure_stack.topic_prefix) in visible
    assert "kafkasql-journal" not in visible

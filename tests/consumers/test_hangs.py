"""A consumer never waits forever for what cannot come, and waits as long as it should.

Offline runs (--until-end) end with a clear error when Kafka cannot be reached, no topic
exists under the prefix, or the schema registry does not answer; each registry request is
bounded by `registry_timeout`; a partition the client does not know yet (a broker stall, a
partition just added) is waited for like the other metadata errors.
"""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import replace
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions

from rlmesh_stream.consumers.builders import make_builders
from rlmesh_stream.consumers.runtime import (
    ConsumerError,
    ConsumerRuntime,
    RuntimeOptions,
    _watermarks,
)
from rlmesh_stream.consumers.sinks import open_sink
from rlmesh_stream.schemas.connection.config import StreamConfig
from rlmesh_stream.schemas.contract import events as ev
from rlmesh_stream.schemas.contract.topics import EventType
from tests.consumers.consumer_helpers import PlainKafkaHooks, create_topics, run_offline
from tests.loopback import closed_port

pytestmark = pytest.mark.stack

ROUTE = ev.RuntimeEnvContext(env_id="e", env_component_id="ec", model_component_id="m")


def test_an_offline_run_under_a_prefix_without_topics_ends_with_an_error(
    stream_config: StreamConfig, duckdb_url: str,
) -> None:
    started = time.monotonic()
    with pytest.raises(ConsumerError, match="none of the 4 topics under prefix"):
        run_offline(stream_config, duckdb_url, ["episodes"])
    assert time.monotonic() - started < 20


def test_an_offline_run_without_kafka_ends_with_an_error_naming_the_bootstrap(
    stream_config: StreamConfig, duckdb_url: str,
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    nowhere = replace(stream_config, bootstrap=f"127.0.0.1:{port}", connect_timeout=3.0)
    started = time.monotonic()
    with pytest.raises(ConsumerError, match=f"cannot reach Kafka at 127.0.0.1:{port} within 3 s"):
        run_offline(nowhere, duckdb_url, ["episodes"])
    assert time.monotonic() - started < 10


def _published_session(config: StreamConfig) -> None:
    create_topics(config, partitions=1)
    hooks = PlainKafkaHooks(config)
    hooks.publish(EventType.SESSION_STARTED,
                  ev.SessionStartedEvent(session_id="s", route=ROUTE, env_id="e"))
    hooks.flush()


def test_an_offline_run_without_the_registry_ends_with_an_error_naming_it(
    stream_config: StreamConfig, duckdb_url: str,
) -> None:
    _published_session(stream_config)
    url = f"http://127.0.0.1:{closed_port()}/apis/ccompat/v7"
    started = time.monotonic()
    with pytest.raises(ConsumerError, match=f"schema registry at {url} did not answer for 3 s"):
        run_offline(replace(stream_config, registry_url=url, connect_timeout=3.0), duckdb_url,
                    ["sessions"])
    assert time.monotonic() - started < 15


def test_consume_until_end_without_the_registry_ends_with_one_error_line(
    stream_config: StreamConfig, tmp_path: Path,
) -> None:
    """As `consume` prints it: the retries are warnings, the end one `Error:` line, the
    URL's password redacted."""
    _published_session(stream_config)
    cli = str(Path(sys.executable).parent / "rlmesh-stream")
    started = time.monotonic()
    result = subprocess.run(
        [cli, "consume", "sessions", "--until-end", "--from-beginning", "--quiet",
         "--sink", f"duckdb://{tmp_path / 'store.duckdb'}", "--bootstrap",
         stream_config.bootstrap, "--topic-prefix", stream_config.topic_prefix,
         "--registry-url", f"http://u:secret@127.0.0.1:{closed_port()}/apis/ccompat/v7"],
        capture_output=True, text=True, timeout=90)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr and "secret" not in result.stderr
    assert lines[-1].startswith("Error: schema registry at http://u:***@127.0.0.1:"), lines
    assert time.monotonic() - started < 45  # 15 s of retries after the group is joined


def test_each_registry_request_of_a_consumer_is_bounded_by_the_registry_timeout(
    stream_config: StreamConfig, duckdb_url: str, hung_registry: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    create_topics(stream_config, partitions=1)
    hooks = PlainKafkaHooks(stream_config)
    hooks.publish(EventType.SESSION_STARTED,
                  ev.SessionStartedEvent(session_id="s", route=ROUTE, env_id="e"))
    hooks.flush()
    hung = replace(stream_config, registry_url=hung_registry, registry_timeout=2.0)
    sink = open_sink(duckdb_url)
    runtime = ConsumerRuntime(hung, make_builders(["sessions"]), sink,
                              RuntimeOptions(group_id=uuid.uuid4().hex, from_beginning=True,
                                             until_end=True))
    caplog.set_level(logging.WARNING, logger="rlmesh_stream.consumers.runtime")
    thread = threading.Thread(target=runtime.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            stamps = [r.created for r in caplog.records
                      if "registry unavailable" in r.getMessage()]
            if len(stamps) >= 3:
                break
            time.sleep(0.2)
    finally:
        runtime.stop()
        thread.join(30)
        sink.close()
    assert len(stamps) >= 3
    # one 2 s request per attempt plus the back-off (0.5 s, then 1 s), not 4 requests each
    assert stamps[2] - stamps[1] < 2 * 2.0 + 1.0 + 1.0


def test_a_partition_the_client_does_not_know_yet_is_waited_for(
    stream_config: StreamConfig,
) -> None:
    topic = f"{stream_config.topic_prefix}.grows"
    admin = AdminClient(stream_config.kafka_config())
    from confluent_kafka.admin import NewTopic

    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    consumer = Consumer({**stream_config.kafka_config(), "group.id": uuid.uuid4().hex})
    result: list[tuple[int, int]] = []
    try:
        consumer.list_topics(topic, timeout=10)
        waiting = threading.Thread(target=lambda: result.append(
            _watermarks(consumer, TopicPartition(topic, 1), deadline_s=30)))
        waiting.start()
        time.sleep(1.5)  # _UNKNOWN_PARTITION meanwhile: partition 1 does not exist yet
        assert waiting.is_alive()
        admin.create_partitions([NewPartitions(topic, 2)])[topic].result(30)
        waiting.join(40)
    finally:
        consumer.close()
    assert result == [(0, 0)]

"""`rlmesh-stream consume`: offline runs from the command line, with plain progress lines."""

from __future__ import annotations

import io
import subprocess
import sys

import pytest

from rlmesh_stream.consumers.progress import Progress
from rlmesh_stream.schemas.connection.config import StreamConfig
from rlmesh_stream.schemas.contract import events as ev
from rlmesh_stream.schemas.contract.topics import EventType
from tests.consumers.consumer_helpers import PlainKafkaHooks, create_topics, query

ROUTE = ev.RuntimeEnvContext(env_id="e", env_component_id="ec", model_component_id="m")

CLI = [sys.executable, "-m", "rlmesh_stream.infra.cli"]


def test_progress_is_plain_lines_with_events_rate_and_lag_off_a_terminal() -> None:
    out = io.StringIO()
    progress = Progress("consume sessions", stream=out, interval=0)
    progress.update(10, 5)
    progress.close()
    first = out.getvalue().splitlines()[0]
    assert first.startswith("consume sessions: 10 events, ")
    assert "events/s" in first and "lag 5 (ETA " in first


def test_progress_gives_the_time_the_lag_will_take_at_the_rate_so_far() -> None:
    out = io.StringIO()
    progress = Progress("consume all", stream=out, interval=0)
    progress._start -= 10.0  # 100 events in 10 s: 10 events/s
    progress.update(100, 50)
    assert out.getvalue().splitlines()[0].endswith("lag 50 (ETA 5 s)")


@pytest.mark.stack
def test_progress_counts_the_episodes_and_lane_steps_written(
    stream_config: StreamConfig, duckdb_url: str, tmp_path,
) -> None:
    connection = ["--bootstrap", stream_config.bootstrap, "--registry-url",
                  stream_config.registry_url, "--topic-prefix", stream_config.topic_prefix]
    published = subprocess.run([*CLI, "simulate", "--sessions", "6", "--lanes", "3",
                                "--episodes", "6", *connection],
                               capture_output=True, text=True, timeout=120)
    assert published.returncode == 0, published.stderr

    done = subprocess.run([*CLI, "consume", "episodes", "--sink", duckdb_url, *connection,
                           "--from-beginning", "--until-end"],
                          capture_output=True, text=True, timeout=120)

    assert done.returncode == 0, done.stderr
    [(episodes, steps)] = query(duckdb_url, "SELECT count(*), sum(step_count) FROM episodes "
                                            "WHERE status = 'completed'")
    assert episodes > 0
    assert done.stderr.splitlines()[-1].endswith(
        f"; written: {episodes} episodes, {steps} lane steps")


def _consume(config: StreamConfig, sink: str, *more: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, "consume", "sessions", "--sink", sink,
         "--bootstrap", config.bootstrap, "--registry-url", config.registry_url,
         "--topic-prefix", config.topic_prefix, "--from-beginning", "--until-end", *more],
        capture_output=True, text=True, timeout=120)


@pytest.mark.stack
def test_consume_until_end_builds_the_table_and_a_rerun_reads_nothing(
    stream_config: StreamConfig, duckdb_url: str,
) -> None:
    create_topics(stream_config, partitions=2)
    hooks = PlainKafkaHooks(stream_config)
    for i in range(7):
        hooks.publish(EventType.SESSION_STARTED,
                      ev.SessionStartedEvent(session_id=f"s{i}", route=ROUTE, env_id="e"))
    hooks.flush()

    first = _consume(stream_config, duckdb_url)
    assert first.returncode == 0, first.stderr
    assert first.stderr.splitlines()[-1].startswith("consume sessions: 7 events")
    assert query(duckdb_url, "SELECT count(*) FROM sessions") == [(7,)]

    again = _consume(stream_config, duckdb_url)
    assert again.returncode == 0, again.stderr
    assert again.stderr.splitlines()[-2].startswith("consume sessions: 0 events")


@pytest.mark.stack
def test_a_run_that_reads_nothing_since_the_sink_holds_offsets_says_how_to_rebuild(
    stream_config: StreamConfig, duckdb_url: str,
) -> None:
    create_topics(stream_config, partitions=2)
    hooks = PlainKafkaHooks(stream_config)
    hooks.publish(EventType.SESSION_STARTED,
                  ev.SessionStartedEvent(session_id="s", route=ROUTE, env_id="e"))
    hooks.flush()
    assert _consume(stream_config, duckdb_url).returncode == 0

    # Another group, from the beginning: the file's offsets (per builder) still win.
    again = _consume(stream_config, duckdb_url, "--group", "another-group")

    assert again.returncode == 0, again.stderr
    last = again.stderr.splitlines()[-1]
    path = duckdb_url.removeprefix("duckdb://")
    assert last.startswith("consume sessions: nothing new to read: ")
    assert f"delete {path} or consume into another --sink" in last


@pytest.mark.stack
def test_the_group_offsets_in_kafka_mirror_the_sink_for_lag_tools(
    stream_config: StreamConfig, duckdb_url: str,
) -> None:
    from confluent_kafka import Consumer, TopicPartition

    create_topics(stream_config, partitions=1)
    hooks = PlainKafkaHooks(stream_config)
    for i in range(3):
        hooks.publish(EventType.SESSION_STARTED,
                      ev.SessionStartedEvent(session_id=f"s{i}", route=ROUTE, env_id="e"))
    hooks.flush()
    assert _consume(stream_config, duckdb_url).returncode == 0
    topic = EventType.SESSION_STARTED.topic(stream_config.topic_prefix)
    probe = Consumer({**stream_config.kafka_config(), "group.id": "rlmesh-stream.sessions"})
    try:
        committed = probe.committed([TopicPartition(topic, 0)], timeout=10)
    finally:
        probe.close()
    assert committed[0].offset == 3
    assert query(duckdb_url, "SELECT next_offset FROM consumer_offsets "
                             f"WHERE topic = '{topic}'") == [(3,)]


@pytest.mark.stack
def test_sigterm_stops_a_live_consumer_after_a_last_checkpoint(
    stream_config: StreamConfig, duckdb_url: str,
) -> None:
    import signal
    import time
    import uuid

    from confluent_kafka.admin import AdminClient

    create_topics(stream_config, partitions=1)
    hooks = PlainKafkaHooks(stream_config)
    hooks.publish(EventType.SESSION_STARTED,
                  ev.SessionStartedEvent(session_id="s0", route=ROUTE, env_id="e"))
    hooks.flush()
    group = f"sigterm-{uuid.uuid4().hex[:8]}"
    proc = subprocess.Popen(
        [*CLI, "consume", "sessions", "--sink", duckdb_url,
         "--bootstrap", stream_config.bootstrap, "--registry-url", stream_config.registry_url,
         "--topic-prefix", stream_config.topic_prefix, "--from-beginning", "--group", group,
         "--checkpoint-interval", "30"],  # no checkpoint before the signal
        stderr=subprocess.PIPE, text=True)
    admin = AdminClient(stream_config.kafka_config())
    deadline = time.monotonic() + 60
    while True:  # until the process holds its partitions
        desc = admin.describe_consumer_groups([group])[group].result(timeout=10)
        if any(m.assignment.topic_partitions for m in desc.members):
            break
        assert time.monotonic() < deadline
        time.sleep(0.2)
    time.sleep(3)  # time to fetch and read the record
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert query(duckdb_url, "SELECT session_id FROM sessions") == [("s0",)]


def test_a_runtime_that_cannot_be_made_gives_one_line_and_its_unused_connection_up(
        monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """The Kafka consumer is made before the sink opens; a runtime refused after that
    (a ConsumerError from its checks) ends the command with one line, the consumer closed."""
    from click.testing import CliRunner

    from rlmesh_stream.consumers import consume_cli
    from rlmesh_stream.consumers.runtime import Connection, ConsumerError

    made: list[Connection] = []

    class Recorded(Connection):
        def __init__(self, *args: object) -> None:
            super().__init__(*args)  # type: ignore[arg-type]
            made.append(self)

    def refused(*_args: object, **_kwargs: object) -> None:
        raise ConsumerError("dead-letter topic refused")

    monkeypatch.setattr(consume_cli, "Connection", Recorded)
    monkeypatch.setattr(consume_cli, "ConsumerRuntime", refused)
    result = CliRunner().invoke(consume_cli.consume, [
        "sessions", "--sink", f"duckdb://{tmp_path / 's.duckdb'}", "--quiet",
        "--bootstrap", "127.0.0.1:1", "--registry-url", "http://127.0.0.1:1"])
    assert result.exit_code == 1
    assert result.output.strip() == "Error: dead-letter topic refused"
    with pytest.raises(RuntimeError, match="closed"):
        made[0].consumer.poll(0)

"""Live mode, and a schema registry outage: the consumer waits and retries, never skips."""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from urllib.parse import urlsplit

import duckdb
import pytest

from rlmesh_stream.consumers.builders import make_builders
from rlmesh_stream.consumers.runtime import ConsumerRuntime, RuntimeOptions
from rlmesh_stream.consumers.sinks import open_sink
from rlmesh_stream.schemas.connection.config import StreamConfig
from rlmesh_stream.schemas.contract import events as ev
from rlmesh_stream.schemas.contract.topics import EventType
from tests.consumers.consumer_helpers import PlainKafkaHooks, create_topics

pytestmark = pytest.mark.stack

ROUTE = ev.RuntimeEnvContext(env_id="e", env_component_id="ec", model_component_id="m")


def _wait_for(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _publish_sessions(hooks: PlainKafkaHooks, ids: list[str]) -> None:
    for sid in ids:
        hooks.publish(EventType.SESSION_STARTED,
                      ev.SessionStartedEvent(session_id=sid, route=ROUTE, env_id="e"))
    hooks.flush()


def _count(path: str) -> int:
    con = duckdb.connect(path)  # same process: shares the runtime's database instance
    try:
        return int(con.execute("SELECT count(*) FROM sessions").fetchone()[0])  # type: ignore[index]
    finally:
        con.close()


def _live_sessions(config: StreamConfig, path: str,
                   runtime_thread: Callable[..., object]) -> ConsumerRuntime:
    """A live `sessions` consumer into the DuckDB file `path`, started on its own thread."""
    runtime = ConsumerRuntime(config, make_builders(["sessions"]), open_sink(f"duckdb://{path}"),
                              RuntimeOptions(group_id=uuid.uuid4().hex, checkpoint_interval=0.1))
    runtime_thread(runtime)
    return runtime


def test_live_mode_applies_events_published_after_it_started(
    stream_config: StreamConfig, tmp_path: object, runtime_thread: Callable[..., object],
) -> None:
    create_topics(stream_config, partitions=2)
    hooks = PlainKafkaHooks(stream_config)
    _publish_sessions(hooks, ["before"])  # live mode starts at the end: not applied
    path = str(tmp_path) + "/live.duckdb"
    runtime = _live_sessions(stream_config, path, runtime_thread)
    _wait_for(lambda: len(runtime.assignment) == 2 * 5)  # 5 topics x 2 partitions
    time.sleep(1.0)  # let the fetchers settle at the end offsets
    _publish_sessions(hooks, ["live-1", "live-2"])
    _wait_for(lambda: _count(path) == 2)


def test_live_mode_applies_what_is_published_while_it_joins_its_group(
    stream_config: StreamConfig, tmp_path: object, runtime_thread: Callable[..., object],
) -> None:
    create_topics(stream_config, partitions=2)
    hooks = PlainKafkaHooks(stream_config)
    _publish_sessions(hooks, ["before"])
    path = str(tmp_path) + "/joining.duckdb"
    runtime = _live_sessions(stream_config, path, runtime_thread)
    _wait_for(lambda: runtime.offsets.start_ends is not None)  # reading has started
    _publish_sessions(hooks, ["joining-1", "joining-2"])  # most likely before the join
    _wait_for(lambda: _count(path) == 2)


def test_live_mode_started_before_its_topics_exist_applies_them_from_their_first_record(
    stream_config: StreamConfig, tmp_path: object, runtime_thread: Callable[..., object],
) -> None:
    path = str(tmp_path) + "/early.duckdb"
    _live_sessions(stream_config, path, runtime_thread)
    time.sleep(2.0)  # subscribed, none of its topics there yet
    create_topics(stream_config, partitions=2)
    _publish_sessions(PlainKafkaHooks(stream_config), ["first-1", "first-2"])
    _wait_for(lambda: _count(path) == 2, timeout=40.0)  # topics are looked for every 10 s


class _Proxy:
    """A TCP relay to the real registry that can be switched on late (a registry outage)."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.server = socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]

    def start(self) -> None:
        self.server.listen(16)
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.server.close()


def test_a_registry_outage_makes_the_consumer_wait_then_apply_everything(
    stream_config: StreamConfig, duckdb_url: str, caplog: pytest.LogCaptureFixture,
    runtime_thread: Callable[..., threading.Thread],
) -> None:
    create_topics(stream_config, partitions=2)
    _publish_sessions(PlainKafkaHooks(stream_config), [f"s{i}" for i in range(20)])
    real = urlsplit(stream_config.registry_url)
    proxy = _Proxy((real.hostname or "127.0.0.1", real.port or 80))
    down = replace(stream_config, registry_url=stream_config.registry_url.replace(
        real.netloc, f"127.0.0.1:{proxy.port}"))  # bound, not listening: connection refused
    sink = open_sink(duckdb_url)
    runtime = ConsumerRuntime(down, make_builders(["sessions"]), sink,
                              RuntimeOptions(group_id=uuid.uuid4().hex, from_beginning=True,
                                             until_end=True))
    caplog.set_level(logging.WARNING, logger="rlmesh_stream.consumers.runtime")
    thread = runtime_thread(runtime)
    try:
        _wait_for(lambda: sum("registry unavailable" in r.getMessage()
                              for r in caplog.records) >= 2)
        assert thread.is_alive() and runtime.events == 0
        proxy.start()  # the registry is back
        thread.join(60)
    finally:
        proxy.close()
    assert not thread.is_alive()
    assert sink.query("SELECT count(*) FROM sessions") == [(20,)]
    assert runtime.dead_letters == 0


def test_a_run_that_fails_cuts_no_checkpoint_as_it_leaves_the_group(
        stream_config: StreamConfig, tmp_path) -> None:
    """The run fails while a checkpoint is being written: leaving the group (the revoke
    callback of the consumer's close) used to cut one more on offsets that checkpoint had
    not been accounted for, and the process fenced itself ("another consumer has applied
    these records") before its error line."""
    from rlmesh_stream.consumers.runtime import ConsumerError

    create_topics(stream_config, partitions=2)
    hooks = PlainKafkaHooks(stream_config)
    _publish_sessions(hooks, ["s1", "s2"])
    hooks.flush()
    sink = open_sink(f"duckdb://{tmp_path}/tables.duckdb")
    applied: list[object] = []
    apply = sink.apply

    def slow_apply(batch: object) -> None:
        applied.append(batch)
        time.sleep(0.5)  # still being written when the run fails
        apply(batch)  # type: ignore[arg-type]

    sink.apply = slow_apply  # type: ignore[method-assign]
    runtime = ConsumerRuntime(stream_config, make_builders(["sessions"]), sink,
                              RuntimeOptions(group_id=uuid.uuid4().hex, from_beginning=True))
    ingest = runtime.reader.ingest

    def failing_once_a_checkpoint_is_in_flight(messages: list) -> None:
        if applied:
            raise ConsumerError("the registry answered with an HTML page")
        ingest(messages)

    runtime.reader.ingest = failing_once_a_checkpoint_is_in_flight  # type: ignore[method-assign]
    with pytest.raises(ConsumerError, match="HTML page"):
        runtime.run()

    assert len(applied) == 1

"""Process exit and asyncio: what is in flight gets out within the budget, the loop never blocks."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.producer.producer_helpers import read_back
from tests.producer.producer_samples import step

pytestmark = pytest.mark.stack

_CHILD = textwrap.dedent("""
    import sys, time, uuid
    sys.path.insert(0, {tests!r})
    from rlmesh_stream.producer.hooks import KafkaRuntimeHooks
    from tests.producer.producer_samples import step
    from rlmesh_stream.schemas.connection.config import StreamConfig
    config = StreamConfig(bootstrap={bootstrap!r}, registry_url={registry!r},
                          topic_prefix={prefix!r})
    # A long linger: without the exit flush these would still be waiting in memory.
    hooks = KafkaRuntimeHooks(config=config, linger_ms=60_000, exit_flush_timeout_s=15,
                              startup_wait_s=15)
    session = str(uuid.uuid4())
    for i in range(200):
        hooks.step_completed(step(session, i))
    print("emitted", flush=True)
    if {wait!r}:
        time.sleep(120)
""")


def _child(stream_config, wait: bool) -> subprocess.Popen[str]:
    script = _CHILD.format(tests=str(Path(__file__).parents[2]), bootstrap=stream_config.bootstrap,
                           registry=stream_config.registry_url,
                           prefix=stream_config.topic_prefix, wait=wait)
    return subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                            cwd=Path(__file__).parents[2])


def test_sigterm_flushes_what_is_in_flight_before_the_process_dies(stream_config):
    child = _child(stream_config, wait=True)
    assert child.stdout is not None and child.stdout.readline().strip() == "emitted"

    started = time.monotonic()
    child.send_signal(signal.SIGTERM)
    code = child.wait(timeout=30)
    landed = read_back(stream_config.bootstrap, stream_config.registry_url,
                       stream_config.topic_prefix, expected=200, timeout=20, decode=False)

    assert code == -signal.SIGTERM  # it still dies by the signal, as without us
    assert time.monotonic() - started < 15
    assert sorted(r.sequence for r in landed) == list(range(200))


def test_interpreter_exit_flushes_a_hook_nobody_closed(stream_config):
    child = _child(stream_config, wait=False)
    assert child.wait(timeout=60) == 0

    landed = read_back(stream_config.bootstrap, stream_config.registry_url,
                       stream_config.topic_prefix, expected=200, timeout=20, decode=False)

    assert sorted(r.sequence for r in landed) == list(range(200))


def test_callbacks_from_a_coroutine_return_at_once_and_aflush_leaves_the_loop_running(
    make_hooks,
):
    hooks = make_hooks(linger_ms=200)

    async def rollout() -> tuple[float, int, int]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.001)

        task = asyncio.create_task(ticker())
        started = time.perf_counter()
        for i in range(500):
            hooks.step_completed(step("async-session", i))
        emit_seconds = time.perf_counter() - started
        before = ticks
        left = await hooks.aflush(15)
        task.cancel()
        return emit_seconds, left, ticks - before

    emit_seconds, left, ticks_while_flushing = asyncio.run(rollout())

    assert emit_seconds < 0.5  # 500 callbacks never waited on the network
    assert left == 0 and hooks.stats().delivered == 500
    assert ticks_while_flushing > 10  # the event loop kept running during the flush

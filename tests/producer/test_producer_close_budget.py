"""`close(t)` returns within about t seconds, whatever the servers do.

A registry that accepts connections but never answers (a request hangs until
its timeout) and a broker that is not there must not stretch the budget a
rollout's shutdown gives the hook.
"""

from __future__ import annotations

import time
import uuid

import pytest

from rlmesh_stream.infra import proc
from rlmesh_stream.producer.hooks import KafkaRuntimeHooks
from rlmesh_stream.schemas.connection.config import StreamConfig
from tests.producer.producer_samples import step

MARGIN_S = 1.0  # scheduling on a loaded 2-core CI machine; the old close(3) took 7-8 s


@pytest.mark.parametrize("spool", [False, True], ids=["memory", "spool"])
def test_close_returns_within_its_budget_with_a_hung_registry_and_no_broker(
    hung_registry: str, spool: bool, tmp_path,
) -> None:
    config = StreamConfig(bootstrap=f"127.0.0.1:{proc.free_port()}", registry_url=hung_registry)
    options = {"overflow": "spool", "spool_dir": tmp_path} if spool else {}
    hooks = KafkaRuntimeHooks(config=config, startup_wait_s=0, install_exit_handlers=False,
                              **options)
    session = str(uuid.uuid4())
    for i in range(100):
        hooks.step_completed(step(session, i))
    time.sleep(0.5)  # the drainer is inside its first registry request by now

    started = time.monotonic()
    stats = hooks.close(3)
    took = time.monotonic() - started

    assert took < 3 + MARGIN_S
    assert stats.accepted == 100
    # Nothing vanished: kept in the spool for the next process, or counted failed.
    assert (stats.spooled, stats.failed) == ((100, {}) if spool else (0, {"closed": 100}))

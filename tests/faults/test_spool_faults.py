"""The producer's spool directory full, or read-only, while the rollout runs.

The registry is down when the producer starts, so every event it accepts
must wait in the spool; the spool is a tiny tmpfs (really full: ENOSPC) or a
read-only bind mount (EROFS). The rollout must neither crash nor hang: each
event that cannot be spooled is counted failed with the OS error in the log,
and once the registry is back everything that was spooled is delivered, once.
Needs root (mount); skipped otherwise.

And a spool a machine crash damaged: a producer leaves its events in the
spool (Kafka unreachable, then closed), one byte in the middle of its segment
is zeroed, and the next producer on that spool must deliver every other
event and count the one it lost (no mount needed).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from rlmesh_stream.infra.cluster import LocalCluster
from rlmesh_stream.infra.proc import free_port
from rlmesh_stream.producer.hooks import KafkaRuntimeHooks
from rlmesh_stream.producer.simulator import simulate_fleet
from rlmesh_stream.schemas.connection.config import StreamConfig
from tests.faults.fault_harness import (
    ConsumerProcess,
    FaultTable,
    ProducerRun,
    fresh_database,
    scenario_config,
    verdict,
    wait_caught_up,
    wait_until,
)
from tests.mounts import made_read_only, small_tmpfs

pytestmark = pytest.mark.timeout(600)

SPOOL_BYTES = 256 * 1024
ROLLOUT_LIMIT_S = 60.0  # the whole simulated rollout, flat out, must end well within this


@dataclass
class SpoolCase:
    """One producer whose spool has a fault, with its own topics, sink and consumer."""

    name: str
    spool: Path
    config: StreamConfig
    sink: str
    group: str
    run: ProducerRun


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture(scope="module")
def spool_errors() -> Iterator[list[str]]:
    """The ERROR lines logged while the spool scenarios run."""
    handler = _Lines()
    logging.getLogger().addHandler(handler)
    try:
        yield handler.lines
    finally:
        logging.getLogger().removeHandler(handler)


@pytest.fixture(scope="module")
def spool_cases(spool_errors: list[str],
    cluster: LocalCluster, postgres_dsn: str, tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[str, SpoolCase]]:
    """Both spool faults under one registry outage (one registry restart, not two)."""
    root = tmp_path_factory.mktemp("spool-faults")
    with contextlib.ExitStack() as stack:
        full = stack.enter_context(small_tmpfs(root / "full", SPOOL_BYTES))
        read_only = root / "read-only"
        read_only.mkdir()
        cases: dict[str, SpoolCase] = {}
        for name, spool in (("full", full), ("read-only", read_only)):
            config = scenario_config(cluster.bootstrap, cluster.registry_url)
            cases[name] = SpoolCase(
                name, spool, config, fresh_database(postgres_dsn),
                f"rlmesh-stream.{config.topic_prefix.split('.')[0]}",
                ProducerRun(config, seed=30, sessions=20, rate=0.0,
                            settings={"overflow": "spool", "spool_dir": spool},
                            gate=threading.Event()))
        consumers = [ConsumerProcess(c.config, c.sink, c.group, root, c.name)
                     for c in cases.values()]
        cluster.stop_registry()
        try:
            for case in cases.values():
                case.run.start()
            for case in cases.values():
                wait_until("the hook to be built",
                           lambda c=case: c.run.hooks is not None or c.run.error is not None,
                           30, 0.1)
            stack.enter_context(made_read_only(read_only))
            for case in cases.values():
                assert case.run.gate is not None
                case.run.gate.set()  # the rollouts start with the faults in place
            for case in cases.values():
                wait_until(f"the {case.name} rollout to end",
                           lambda c=case: c.run.seconds is not None, ROLLOUT_LIMIT_S, 0.2)
                assert case.run.hooks is not None and case.run.hooks.stats().delivered == 0
        finally:
            cluster.start_registry()
        for case in cases.values():
            case.run.join(240)
            wait_caught_up(case.config, case.sink)
        for consumer in consumers:
            assert consumer.stop() == 0
        yield cases


def test_a_full_spool_counts_what_it_cannot_hold_and_delivers_the_rest(
    spool_cases: dict[str, SpoolCase], fault_table: FaultTable,
) -> None:
    case = spool_cases["full"]
    v = verdict(f"spool directory full ({SPOOL_BYTES // 1024} KiB tmpfs) while the registry "
                "is down", case.sink, [case.run])
    fault_table.add(v)
    assert case.run.stats is not None
    assert case.run.stats.failed == {"spool:OSError": v.counted_drops}
    assert 0 < v.counted_drops < v.accepted
    assert (v.lost, v.duplicates) == (0, 0)


def test_a_read_only_spool_counts_every_event_it_cannot_hold(
    spool_cases: dict[str, SpoolCase], fault_table: FaultTable,
) -> None:
    case = spool_cases["read-only"]
    v = verdict("spool directory read-only while the registry is down", case.sink, [case.run])
    fault_table.add(v)
    assert case.run.stats is not None
    assert case.run.stats.failed == {"spool:OSError": v.accepted}
    assert (v.lost, v.duplicates) == (0, 0)


def test_spool_errors_are_logged_with_the_os_error(
    spool_cases: dict[str, SpoolCase], spool_errors: list[str],
) -> None:
    text = "\n".join(spool_errors)
    assert "No space left on device" in text
    assert "Read-only file system" in text


def _left_in_the_spool(config: StreamConfig, spool: Path) -> ProducerRun:
    """A producer whose every event ends in `spool`: Kafka unreachable, then closed."""
    unreachable = dataclasses.replace(config, bootstrap=f"127.0.0.1:{free_port()}")
    run = ProducerRun(config, seed=31, sessions=4, rate=0.0)
    hooks = KafkaRuntimeHooks(config=unreachable, install_exit_handlers=False, overflow="spool",
                              spool_dir=spool, startup_wait_s=30)
    run.manifest = simulate_fleet(hooks, sessions=run.sessions, episodes=3, seed=run.seed,
                                  rate=0.0, failure_rate=0.0)
    run.stats = hooks.close(3)
    return run


def _zero_a_byte_in_the_middle(spool: Path) -> None:
    """What a machine crash can leave: one byte of a written segment zeroed."""
    segment = max(spool.rglob("*.seg"), key=lambda p: p.stat().st_size)
    data = bytearray(segment.read_bytes())
    at = len(data) // 2
    while data[at] == 0:
        at += 1
    data[at] = 0
    segment.write_bytes(bytes(data))


def test_a_spool_a_crash_damaged_delivers_the_rest_and_counts_the_loss(
    cluster: LocalCluster, postgres_dsn: str, tmp_path: Path, fault_table: FaultTable,
) -> None:
    spool = tmp_path / "spool"
    config = scenario_config(cluster.bootstrap, cluster.registry_url)
    sink = fresh_database(postgres_dsn)
    dead = _left_in_the_spool(config, spool)
    assert dead.stats is not None and dead.stats.spooled == dead.stats.accepted > 0
    _zero_a_byte_in_the_middle(spool)
    consumer = ConsumerProcess(config, sink, f"rlmesh-stream.{config.topic_prefix.split('.')[0]}",
                               tmp_path, "damaged")
    heir = ProducerRun(config, seed=32, sessions=2, rate=0.0,
                       settings={"overflow": "spool", "spool_dir": spool})
    heir.start()
    heir.join(240)
    wait_caught_up(config, sink)
    assert consumer.stop() == 0

    v = verdict("spool segment damaged by a crash (one byte zeroed mid-segment)", sink,
                [dead, heir])
    fault_table.add(v)
    assert heir.stats is not None and heir.stats.failed == {"spool:corrupt": 1}
    assert heir.stats.recovered == dead.stats.spooled
    assert (v.counted_drops, v.lost, v.duplicates) == (1, 0, 0)
    assert len(list((spool / "corrupt").iterdir())) == 1

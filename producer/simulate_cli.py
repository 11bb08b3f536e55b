"""`rlmesh-stream simulate`: publish a simulated fleet's events and write what was emitted."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import click

from rlmesh_stream.schemas.cli_values import (
    COUNT_OR_ZERO,
    NON_NEGATIVE,
    POSITIVE,
    FiniteFloatRange,
    output_dir,
    output_file,
)
from rlmesh_stream.schemas.connection.cli_options import stream_options
from rlmesh_stream.schemas.connection.config import StreamConfig

MAX_LANES = 4096
"""Lanes of one simulated vector env at most: each is state held for the whole run."""


@click.command("simulate")
@click.option("--sessions", default=8, show_default=True, type=COUNT_OR_ZERO,
              help="Sessions (routes) to simulate.")
@click.option("--lanes", default=4, show_default=True, type=click.IntRange(1, MAX_LANES),
              help="Vector env lanes per session.")
@click.option("--episodes", default=5, show_default=True, type=COUNT_OR_ZERO,
              help="Episode starts per session (its budget).")
@click.option("--lane-driven", default=0, show_default=True, type=click.IntRange(0, MAX_LANES),
              help="Extra lane-driven sessions: one per lane of one shared endpoint "
                   "(route.lane set).")
@click.option("--seed", default=0, show_default=True, type=click.IntRange(-2**63, 2**63 - 1),
              help="Same seed, same events.")
@click.option("--rate", type=POSITIVE, default=None,
              help="Events per second to emit at (default: as fast as possible).")
@click.option("--failure-rate", type=FiniteFloatRange(0, 1), default=0.15, show_default=True,
              help="Fraction of sessions that fail midway.")
@click.option("--format", "fmt", type=click.Choice(["avro", "protobuf"]), default="avro",
              show_default=True, help="Wire format of the payloads.")
@click.option("--spool-dir", type=output_dir(), default=None,
              help="Spill to this directory when Kafka cannot keep up (default: drop).")
@click.option("--manifest", "manifest_path", type=output_file(),
              default=None, help="Write the manifest JSON here (default: print a summary only).")
@click.option("--flush-timeout", type=NON_NEGATIVE, default=60.0, show_default=True,
              help="Seconds to wait for delivery at the end.")
@click.option("--session-end-flush", type=NON_NEGATIVE, default=0.0, show_default=True,
              help="Seconds each session's end waits for delivery, as a rollout machine's hook "
                   "does (2 s there); 0: publish on, the flush at the end delivers all.")
@stream_options
def simulate(config: StreamConfig, sessions: int, lanes: int, episodes: int, lane_driven: int,
             seed: int,
             rate: float | None, failure_rate: float, fmt: str, spool_dir: Path | None,
             manifest_path: Path | None, flush_timeout: float, session_end_flush: float
             ) -> None:
    """Drive KafkaRuntimeHooks with a deterministic simulated fleet.

    The events follow the runtime's semantics (order, vector lanes, NEXT_STEP
    autoreset rolls, window and session telemetry, advisories, logs, some
    failed sessions). The manifest lists every episode (steps, reward,
    status), every session (status, advisories, telemetry rows) and the
    event counts, for checking tables against.

    A load generator can wait: when the producer's queue is full it waits for room
    (Kafka delivering) instead of dropping, and publishes as fast as Kafka takes it.
    """
    if sessions == 0 and lane_driven == 0:
        raise click.BadParameter("0, and no --lane-driven sessions either: nothing to "
                                 "simulate", param_hint="'--sessions'")
    from rlmesh_stream.producer.config import ProducerSettings
    from rlmesh_stream.producer.hooks import KafkaRuntimeHooks
    from rlmesh_stream.producer.simulator import WaitingForRoom, simulate_fleet

    started = time.monotonic()
    options: dict[str, Any] = {"spool_dir": spool_dir} if spool_dir is not None else {}
    # A full queue waits as long as a record may take to deliver (delivery_timeout_ms) rather
    # than the hook's 50 ms before it drops: a rollout must never stall, a load generator may.
    # Session ends do not wait for delivery either (a 2 s flush each made 20 sessions of
    # 8 000 events take 7.5 s on 1 s of CPU).
    settings = ProducerSettings.from_env(stream=config, format=fmt,
                                         exit_flush_timeout_s=flush_timeout,
                                         session_end_flush_timeout_s=session_end_flush,
                                         **options)
    hooks = KafkaRuntimeHooks(settings=settings.with_overrides(
        max_block_ms=float(settings.delivery_timeout_ms)))
    with hooks:
        manifest = simulate_fleet(WaitingForRoom(hooks), sessions=sessions, lanes=lanes,
                                  episodes=episodes, seed=seed, rate=rate,
                                  failure_rate=failure_rate, lane_driven=lane_driven)
        left = hooks.flush(flush_timeout)
    stats = hooks.stats()
    elapsed = time.monotonic() - started
    if manifest_path is not None:
        manifest.write(manifest_path)
    summary = {
        "sessions": len(manifest.sessions),
        "episodes": len(manifest.episodes),
        "events": manifest.total_events,
        "delivered": stats.delivered,
        "failed": stats.failed,
        "dropped": stats.dropped,
        "undelivered": left,
        "seconds": round(elapsed, 2),
        "producer_id": stats.producer_id,
        "topic_prefix": config.topic_prefix,
        "manifest": str(manifest_path) if manifest_path else None,
    }
    click.echo(json.dumps(summary))
    if left or stats.failed_total or stats.dropped:
        raise click.ClickException(
            f"{left} events undelivered, {stats.failed_total} failed, {stats.dropped} dropped")

"""A simulated fleet published on the test stack, and its clean single Parquet export: the
reference rows the group, Iceberg and fault tests compare their exports with."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path
from typing import Any

from rlmesh_stream.consumers.datasets.episodes import Filters
from rlmesh_stream.consumers.datasets.export import ExportOptions, run_export
from rlmesh_stream.consumers.runtime import RuntimeOptions
from rlmesh_stream.infra.topics import ensure_topics
from rlmesh_stream.producer.hooks import KafkaRuntimeHooks
from rlmesh_stream.producer.simulator import WaitingForRoom, simulate_fleet
from rlmesh_stream.schemas.connection.config import StreamConfig
from tests.publishing import close_delivered
from tests.record_copies import new_prefix

DATASET = "rlmesh/x-v0"


def publish_fleet(stack: Any, *, partitions: int, sessions: int, episodes: int,
                  seed: int) -> StreamConfig:
    """A fleet of 3-lane sessions (a tenth failing, half NEXT_STEP, advisory windows) on
    `partitions` partitions under a fresh prefix, every record delivered."""
    config = new_prefix(stack)
    ensure_topics(config, partitions=partitions)
    hooks = KafkaRuntimeHooks(config=config, install_exit_handlers=False)
    simulate_fleet(WaitingForRoom(hooks), sessions=sessions, lanes=3, episodes=episodes, seed=seed,
                   failure_rate=0.1, next_step_fraction=0.5, window_every=50)
    close_delivered(hooks)
    return config


def clean_export(config: StreamConfig, out: Path) -> Path:
    """One uninterrupted Parquet export of everything under `config`'s prefix, into `out`."""
    run_export(config, ExportOptions(out, "parquet", DATASET, Filters()),
               RuntimeOptions(group_id=f"g-{uuid.uuid4().hex[:8]}", from_beginning=True,
                              until_end=True))
    return out


def iceberg_cli(config: StreamConfig, catalog: Path, table: str, group: str,
                *extra: str) -> list[str]:
    """`export trajectories --format iceberg` over the fleet, as a member process runs it."""
    return [sys.executable, "-m", "rlmesh_stream.infra.cli", "export", "trajectories",
            "--bootstrap", config.bootstrap, "--registry-url", config.registry_url,
            "--topic-prefix", config.topic_prefix, "--format", "iceberg",
            "--catalog", f"sqlite:///{catalog}", "--table", table, "--group", group,
            "--from-beginning", "--until-end", "--quiet", *extra]

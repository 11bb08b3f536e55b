"""`rlmesh-stream demo`: the command; what it runs is `demo.py`'s (`run_demo`)."""

from __future__ import annotations

from pathlib import Path

import click

from rlmesh_stream.infra.demo import CONCURRENT_SESSIONS, run_demo
from rlmesh_stream.schemas.cli_values import output_dir
from rlmesh_stream.schemas.connection.cli_options import stream_options
from rlmesh_stream.schemas.connection.config import StreamConfig


@click.command()
@stream_options
@click.option("--episodes", default=6, show_default=True, type=click.IntRange(1, 200),
              help="Episodes per session (each checkpoint runs "
              f"{CONCURRENT_SESSIONS} concurrent sessions).")
@click.option("--out", "out_dir", default="rlmesh-demo", show_default=True,
              type=output_dir(),
              help="Directory for the store, reports, training log and plot.")
@click.option("--start-stack/--no-start-stack", default=True, show_default=True,
              help="Start the local stack when nothing answers at the default address.")
def demo(config: StreamConfig, episodes: int, out_dir: Path, start_stack: bool) -> None:
    """Run real CartPole rollouts through Kafka into tables, then report, join and plot."""
    run_demo(config, episodes, out_dir, start_stack, click.echo)

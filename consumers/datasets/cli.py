"""`rlmesh-stream export trajectories`: the stream's episodes as a Minari or Parquet dataset."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import click

from rlmesh_stream.schemas.access import AccessDeniedError
from rlmesh_stream.schemas.cli_options import stream_options, topic_name_callback
from rlmesh_stream.schemas.config import StreamConfig


@click.group()
def export() -> None:
    """Export the event history as datasets."""


@export.command("trajectories")
@stream_options
@click.option("--out", "out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Dataset directory (MINARI_DATASETS_PATH for --format minari).")
@click.option("--format", "fmt", type=click.Choice(["minari", "parquet"]), required=True)
@click.option("--dataset-id", default="rlmesh/trajectories-v0", show_default=True,
              help="Minari dataset id NAMESPACE/NAME-vN.")
@click.option("--group", "group_id", default=None,
              help="Consumer group id [default: rlmesh-stream.export.<dataset id>]")
@click.option("--from-beginning", is_flag=True,
              help="Start partitions the dataset has no offset for at the earliest record.")
@click.option("--until-end", is_flag=True,
              help="Stop at the end seen at start, and decide on every episode still open.")
@click.option("--env-id", "env_ids", multiple=True, help="Only these env ids (repeatable).")
@click.option("--model", "models", multiple=True,
              help="Only these model component ids (repeatable).")
@click.option("--include-abandoned", is_flag=True,
              help="Also export the episodes of failed sessions, flagged abandoned.")
@click.option("--exclude-caution", is_flag=True,
              help="Leave out sessions with a caution relay advisory (else they are tagged).")
@click.option("--settle-time", default=None, type=click.FloatRange(min=0),
              help="--until-end: a process holding no partitions this many seconds after "
                   "joining stops [default: three session timeouts, 30 s].")
@click.option("--checkpoint-interval", default=1.0, show_default=True,
              type=click.FloatRange(min=0), help="Seconds between commits.")
@click.option("--max-batch", default=20_000, show_default=True, type=click.IntRange(min=1),
              help="Records per commit at most.")
@click.option("--dlq-topic", default=None, callback=topic_name_callback,
              help="Dead-letter topic [default: <prefix>.dlq]")
@click.option("--quiet", is_flag=True, help="No progress output.")
def trajectories(config: StreamConfig, out: Path, fmt: str, dataset_id: str,
                 group_id: str | None, from_beginning: bool, until_end: bool,
                 env_ids: tuple[str, ...], models: tuple[str, ...], include_abandoned: bool,
                 exclude_caution: bool, settle_time: float | None, checkpoint_interval: float,
                 max_batch: int, dlq_topic: str | None, quiet: bool) -> None:
    """Join the step, action, observation and episode events into whole episodes."""
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        from rlmesh_stream.consumers.datasets.episodes import Filters
        from rlmesh_stream.consumers.datasets.export import (
            DatasetError,
            ExportOptions,
            check_dataset_id,
            run_export,
        )
        from rlmesh_stream.consumers.progress import Progress
        from rlmesh_stream.consumers.runtime import RuntimeOptions
    except ModuleNotFoundError as exc:
        raise click.ClickException(f"{exc.name} is missing: pip install "
                                   "'rlmesh-stream[datasets]'") from None
    try:
        check_dataset_id(dataset_id)
        options = ExportOptions(out=out, fmt=fmt, dataset_id=dataset_id, filters=Filters(
            env_ids=env_ids, models=models, include_abandoned=include_abandoned,
            exclude_caution=exclude_caution))
        runtime_options = RuntimeOptions(
            group_id=group_id or f"rlmesh-stream.export.{dataset_id}",
            from_beginning=from_beginning, until_end=until_end, settle_time=settle_time,
            checkpoint_interval=checkpoint_interval, max_batch=max_batch, dlq_topic=dlq_topic)
        progress = None if quiet else Progress("export trajectories")
        sink, runtime = run_export(config, options, runtime_options, progress=progress)
    except (DatasetError, AccessDeniedError) as exc:
        raise click.ClickException(str(exc)) from None
    except KeyboardInterrupt:
        return
    if runtime.dead_letters:
        click.echo(f"{runtime.dead_letters} undecodable records sent to the dead-letter topic",
                   err=True)
    cert = sink.store.committed.certificate
    click.echo(json.dumps({k: cert.get(k) for k in (
        "episodes_exported", "steps_exported", "episodes_skipped", "gaps", "duplicates",
        "dead_letters")}, sort_keys=True))
    if fmt == "minari":
        click.echo(f"load it: MINARI_DATASETS_PATH={out} python -c \"import minari; "
                   f"print(minari.load_dataset('{dataset_id}'))\"")

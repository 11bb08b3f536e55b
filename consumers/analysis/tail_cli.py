"""`rlmesh-stream tail EVENT`: the command; what it runs is `tail.py`'s (`run_tail`)."""

from __future__ import annotations

import sys

import click

from rlmesh_stream.consumers.analysis.tail import TailError, run_tail
from rlmesh_stream.schemas.cli_values import COUNT, Text
from rlmesh_stream.schemas.connection.cli_options import stream_options
from rlmesh_stream.schemas.connection.config import StreamConfig
from rlmesh_stream.schemas.connection.redact import redact_url
from rlmesh_stream.schemas.contract.topics import EventType


@click.command()
@stream_options
@click.argument("event", type=click.Choice([et.value for et in EventType]))
@click.option("--session", "session_id", default=None, type=Text(),
              help="Only this session's events.")
@click.option("--from-beginning", is_flag=True,
              help="Start at the oldest retained record instead of new records only.")
@click.option("--json", "as_json", is_flag=True,
              help="One JSON document per event (bytes base64), with topic/partition/offset.")
@click.option("-c", "--count", type=COUNT, default=None,
              help="Exit after printing this many events.")
@click.option("-e", "--exit-at-end", is_flag=True,
              help="Exit once every partition has been read to its end.")
def tail(config: StreamConfig, event: str, session_id: str | None, from_beginning: bool,
         as_json: bool, count: int | None, exit_at_end: bool) -> None:
    """Print decoded EVENT records live, one line each (like kcat, registry-aware)."""
    try:
        run_tail(config, EventType(event), lambda line: click.echo(line),
                 session_id=session_id, from_beginning=from_beginning, as_json=as_json,
                 count=count, exit_at_end=exit_at_end,
                 warn=lambda msg: click.echo(f"warning: {msg}", err=True))
    except TailError as exc:
        raise click.ClickException(redact_url(str(exc))) from exc
    except KeyboardInterrupt:
        sys.exit(130)

"""`rlmesh-stream infra smoke`: the command; what it runs is `smoke.py`'s (`run_smoke`)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from urllib.parse import urlparse

import click

from rlmesh_stream.infra.smoke import SmokeError, run_smoke
from rlmesh_stream.schemas.cli_values import PathValue
from rlmesh_stream.schemas.connection.cli_options import stream_options
from rlmesh_stream.schemas.connection.config import StreamConfig
from rlmesh_stream.schemas.connection.redact import redact_secrets, redact_url


def _port(address: str, default: int) -> int:
    return urlparse(address if "://" in address else f"//{address}").port or default


@click.command()
@stream_options
@click.option("--up/--no-up", "start", default=True, show_default=True,
              help="Start the local stack first, on the ports of --bootstrap/--registry-url.")
@click.option("--home", type=PathValue(file_okay=False), default=None,
              envvar="RLMESH_STREAM_HOME", help="Local stack directory (with --up).")
def smoke(config: StreamConfig, start: bool, home: Path | None) -> None:
    """Register a schema, produce one Avro record and read it back."""
    if start:
        from rlmesh_stream.infra.errors import StackError
        from rlmesh_stream.infra.stack import LocalStack

        stack = LocalStack(home, kafka_port=_port(config.bootstrap, 9092),
                           registry_port=_port(config.registry_url, 8081))
        try:
            info = stack.up(log=lambda m: click.echo(m, err=True))
        except StackError as exc:
            raise click.ClickException(str(exc)) from None
        config = replace(config, bootstrap=info.bootstrap, registry_url=info.registry_url)
    urls = (config.bootstrap, config.registry_url)
    click.echo(redact_url(f"bootstrap {config.bootstrap}, registry {config.registry_url}"))
    try:
        result = run_smoke(config)
    except SmokeError as exc:
        raise click.ClickException(redact_secrets(str(exc), *urls)) from None
    except Exception as exc:  # any failure of the stack is the answer: one line, no password
        raise click.ClickException(
            redact_secrets(f"smoke failed: {str(exc) or type(exc).__name__}", *urls)) from None
    click.echo(f"registered {result.subject} as schema id {result.schema_id}")
    click.echo(f"produced to {result.topic}: {result.sent}")
    click.echo(f"read back:  {result.received}")
    click.echo(f"smoke OK in {result.seconds} s")

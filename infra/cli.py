"""The `rlmesh-stream` command: one root group that gathers each package's commands.

Subcommands are imported lazily, so `rlmesh-stream --help` stays fast and a
command only pays for the libraries it uses (DuckDB, rlmesh, ...).
"""

from __future__ import annotations

import importlib
import os
from typing import Any

import click

from rlmesh_stream.schemas.redact import redact_url

# command name -> "module:attribute" of its click command or group
COMMANDS: dict[str, str] = {
    "infra": "rlmesh_stream.infra.stack_cli:infra",
    "topics": "rlmesh_stream.infra.topics_cli:topics",
    "schemas": "rlmesh_stream.schemas.cli:schemas",
    "simulate": "rlmesh_stream.producer.cli:simulate",
    "consume": "rlmesh_stream.consumers.cli:consume",
    "report": "rlmesh_stream.consumers.analysis.report_cli:report",
    "tail": "rlmesh_stream.consumers.analysis.tail:tail",
    "join": "rlmesh_stream.consumers.analysis.join_cli:join",
    "demo": "rlmesh_stream.infra.demo:demo",
}


class LazyGroup(click.Group):
    """A group whose subcommands are imported on first use.

    Whatever a command fails with is shown as one `Error:` line with every URL
    password redacted (a registry URL can carry one): a `ClickException`'s
    message, or for anything unexpected its type and message (the traceback
    with RLMESH_STREAM_TRACEBACK=1).
    """

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.UsageError:
            raise  # names an option or argument; --registry-url is checked without a password
        except click.ClickException as exc:
            message = exc.format_message()
            if redact_url(message) == message:
                raise
            # A plain ClickException with the original's exit status.
            redacted = type("Redacted", (click.ClickException,), {"exit_code": exc.exit_code})
            raise redacted(redact_url(message)) from None
        except (click.exceptions.Exit, click.Abort, KeyboardInterrupt, SystemExit):
            raise
        except Exception as exc:
            if os.environ.get("RLMESH_STREAM_TRACEBACK"):
                raise
            raise click.ClickException(
                redact_url(f"{type(exc).__name__}: {exc}")) from None

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, attr = target.split(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            return _unavailable(cmd_name, target)
        command: Any = getattr(module, attr)
        return command


def _unavailable(name: str, target: str) -> click.Command:
    @click.command(name, help=f"(not built yet: {target})")
    def missing() -> None:
        raise click.ClickException(f"'{name}' is not available in this build ({target}).")

    return missing


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="rlmesh-stream")
def main() -> None:
    """Stream rlmesh runtime events through Kafka into queryable tables."""


if __name__ == "__main__":
    main()

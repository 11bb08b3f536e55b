"""The `rlmesh-stream` command: one root group that gathers each package's commands.

Subcommands are imported lazily, so `rlmesh-stream --help` stays fast and a
command only pays for the libraries it uses (DuckDB, rlmesh, ...).
"""

from __future__ import annotations

import importlib
from typing import Any

import click

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


class OneLineUsageError(click.UsageError):
    """A usage error shown as one `Error:` line (what was wrong, and where help is)."""

    def show(self, file: Any = None) -> None:
        hint = f" (see '{self.ctx.command_path} --help')" if self.ctx is not None else ""
        click.echo(f"Error: {self.format_message()}{hint}", file=file, err=file is None)


class LazyGroup(click.Group):
    """A group whose subcommands are imported on first use.

    Bad input on the command line of any command is one line on stderr: click's usage
    block above the error is left out (the line says where help is).
    """

    def make_context(self, info_name: str | None, args: list[str],
                     parent: click.Context | None = None, **extra: Any) -> click.Context:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.UsageError as exc:
            raise _one_line(exc) from None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            raise _one_line(exc) from None

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


# A group run without a command shows its help: that is not an error to shorten.
_HELP_ERRORS: tuple[type[Exception], ...] = tuple(
    t for t in (getattr(click.exceptions, "NoArgsIsHelpError", None),) if t is not None)


def _one_line(exc: click.UsageError) -> click.UsageError:
    if isinstance(exc, (OneLineUsageError, *_HELP_ERRORS)):
        return exc
    return OneLineUsageError(exc.format_message(), exc.ctx)


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

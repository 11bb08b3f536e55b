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
    "export": "rlmesh_stream.consumers.datasets.cli:export",
}


class LazyGroup(click.Group):
    """A group whose subcommands are imported on first use."""

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

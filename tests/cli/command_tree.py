"""Every command of the CLI by its command line (`export trajectories`), as click holds it:
what the help-order and option-sweep tests walk."""

from __future__ import annotations

import importlib
from collections.abc import Iterator

import click

from rlmesh_stream.infra.cli import COMMANDS


def _walk(name: str, command: click.Command) -> Iterator[tuple[str, click.Command]]:
    if isinstance(command, click.Group):
        for sub_name, sub in command.commands.items():
            yield from _walk(f"{name} {sub_name}", sub)
    else:
        yield name, command


def command_lines() -> dict[str, click.Command]:
    """Every leaf command under the root, by its command line."""
    lines: dict[str, click.Command] = {}
    for name, target in COMMANDS.items():
        module, attribute = target.split(":")
        lines.update(_walk(name, getattr(importlib.import_module(module), attribute)))
    return lines

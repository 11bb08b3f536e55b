"""`--help` of every command lists its own options first, then the reading options, then the
connection options (set once in the environment, never what a reader looks for)."""

from __future__ import annotations

import click
import pytest

from rlmesh_stream.schemas.connection.cli_options import ConnectionOption, SharedOption
from tests.cli.command_tree import command_lines


def _rank(param: click.Parameter) -> int:
    if isinstance(param, ConnectionOption):
        return 2
    return 1 if isinstance(param, SharedOption) else 0


COMMAND_LINES = command_lines()


@pytest.mark.parametrize("line", sorted(COMMAND_LINES))
def test_the_help_lists_own_then_reading_then_connection_options(line: str) -> None:
    command = COMMAND_LINES[line]
    options = [p for p in command.get_params(click.Context(command))
               if isinstance(p, click.Option) and "help" not in (p.name or "")]
    ranks = [_rank(p) for p in options]
    assert ranks == sorted(ranks), [f"{p.opts[0]}:{_rank(p)}" for p in options]
    help_text = command.get_help(click.Context(command, info_name=line))
    if any(isinstance(p, ConnectionOption) for p in options):
        own = [p for p in options if _rank(p) == 0]
        first = own[0].opts[0] if own else "--bootstrap"
        assert help_text.index(first) <= help_text.index("--bootstrap")

"""Usage errors are one line; a group run without a command still shows its help."""

from __future__ import annotations

from click.testing import CliRunner

from rlmesh_stream.infra.cli import main


def test_a_group_without_a_command_shows_its_help() -> None:
    result = CliRunner().invoke(main, ["consume"])
    assert result.output.startswith("Usage: ")
    assert "Commands:" in result.output


def test_an_unknown_option_is_one_line_pointing_at_help() -> None:
    result = CliRunner().invoke(main, ["consume", "episodes", "--bogus"])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        "Error: No such option '--bogus'. (see 'main consume episodes --help')"]

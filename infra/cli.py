"""The `rlmesh-stream` command: every command, and the module it comes from, in one table.

`COMMANDS` is the CLI's table of contents: a command (or group) name and the
`module:attribute` of its click object. Adding a command is one line here, and one
in `SUMMARIES` (its line in `rlmesh-stream --help`; a test checks the two agree).
Commands are imported only when used, and `--help` imports none of them, so it
starts at once and a command pays only for the libraries it needs.

Options shared by several commands live in one module each:
`rlmesh_stream.schemas.connection.cli_options` (how to reach Kafka and the schema registry,
`stream_options`, one option per `StreamConfig` field), `rlmesh_stream.consumers.sinks.url`
(the `--sink` store, `sink_option`, parsed into a `SinkURL`) and
`rlmesh_stream.consumers.cli_options` (how `consume` and `export` read the stream, and
their shared epilogue: logging, the dead-letter line).

A command whose optional dependency is not installed (DuckDB for `consume`,
matplotlib for `join --plot`, ...) fails with one line naming the extra to
install; `EXTRAS` maps each optional third-party module to its extra, and
`COMMAND_EXTRAS` names the extra of a command that needs several (the extras
themselves are in pyproject.toml). Likewise a `--sink` that cannot be used is one
`Error:` line from any command, even one that does not catch `SinkError` itself.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

import click

from rlmesh_stream.schemas.cli_values import shown
from rlmesh_stream.schemas.connection.redact import redact_url
from rlmesh_stream.schemas.errors import RlmeshStreamError

# command -> "module:attribute" of its click command or group, in the order data flows
COMMANDS: dict[str, str] = {
    # the stack (infra/)
    "infra": "rlmesh_stream.infra.stack_cli:infra",
    "topics": "rlmesh_stream.infra.topics_cli:topics",
    # the contract (schemas/)
    "schemas": "rlmesh_stream.infra.schemas_cli:schemas",
    # publishing (producer/)
    "simulate": "rlmesh_stream.producer.simulate_cli:simulate",
    # ingestion (consumers/)
    "consume": "rlmesh_stream.consumers.consume_cli:consume",
    # analysis (consumers/analysis/)
    "report": "rlmesh_stream.consumers.analysis.report_cli:report",
    "tail": "rlmesh_stream.consumers.analysis.tail_cli:tail",
    "join": "rlmesh_stream.consumers.analysis.join_cli:join",
    # datasets (consumers/datasets/)
    "export": "rlmesh_stream.consumers.datasets.export_cli:export",
    # everything at once (infra/)
    "demo": "rlmesh_stream.infra.demo_cli:demo",
}

# command -> its line in `rlmesh-stream --help`: the first sentence of its own help, kept
# here so the root help imports no command (tests/cli/test_startup_imports.py checks both
# agree). A command missing here is imported to ask it.
SUMMARIES: dict[str, str] = {
    "infra": "Run the local Kafka + schema registry stack (no Docker needed).",
    "topics": "Manage the event topics.",
    "schemas": "Register, check and document the event schemas.",
    "simulate": "Drive KafkaRuntimeHooks with a deterministic simulated fleet.",
    "consume": "Build tables from the event topics (DuckDB file or PostgreSQL).",
    "report": "Reports over the consumed tables (advisories, delivery, episodes, telemetry).",
    "tail": "Print decoded EVENT records live, one line each (like kcat, registry-aware).",
    "join": "Join the episode table with a training log and summarise per checkpoint.",
    "export": "Export the event history as datasets.",
    "demo": "Run real CartPole rollouts through Kafka into tables, then report, join and plot.",
}

# optional third-party module (top-level name) -> the extra that installs it
EXTRAS: dict[str, str] = {
    "duckdb": "consumers",
    "pyarrow": "consumers",
    "psycopg": "consumers",
    "rich": "consumers",
    "rlmesh": "rlmesh",
    "gymnasium": "rlmesh",
    "numpy": "rlmesh",
    "matplotlib": "analysis",
    "minari": "datasets",
    "tensorboard": "training-logs",
    "tensorboardX": "training-logs",
    "mlflow": "training-logs",
    "cryptography": "stack",
    "testcontainers": "docker",
}

# command -> the extra that installs everything it needs, where that is more than the
# extra of the one module found missing (join and the demo need `analysis` as a whole)
COMMAND_EXTRAS: dict[str, str] = {"join": "analysis", "demo": "analysis", "export": "datasets"}


def missing_extra(exc: ModuleNotFoundError) -> str | None:
    """The extra that would install the module `exc` could not find, if it is one of ours."""
    return EXTRAS.get((exc.name or "").split(".")[0])


def missing_extra_message(command: str, exc: ModuleNotFoundError) -> str:
    extra = COMMAND_EXTRAS.get(command) or missing_extra(exc)
    return (f"`{command}` needs the {extra!r} extra ({exc.name} is not installed): "
            f"pip install 'rlmesh-stream[{extra}]'")


class OneLineUsageError(click.UsageError, RlmeshStreamError):
    """A usage error shown as one `Error:` line (what was wrong, and where help is)."""

    def show(self, file: Any = None) -> None:
        hint = f" (see '{self.ctx.command_path} --help')" if self.ctx is not None else ""
        click.echo(f"Error: {self.format_message()}{hint}", file=file, err=file is None)


class LazyGroup(click.Group):
    """The root group: subcommands imported on first use, and one `Error:` line for any failure.

    A missing extra is named; whatever else a command fails with is shown as one
    `Error:` line with every URL password redacted (a registry URL can carry one): a
    `ClickException`'s message, for an `OSError` the file and the system's reason (never
    `OSError: [Errno 36] ...` with a 5 000-character name), or for anything else
    unexpected its type and message (the traceback with RLMESH_STREAM_TRACEBACK=1). Bad
    input on the command line of any command is one line on stderr too: click's usage
    block above the error is left out (the line says where help is).
    """

    def make_context(self, info_name: str | None, args: list[str],
                     parent: click.Context | None = None, **extra: Any) -> click.Context:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.UsageError as exc:
            raise _one_line_usage(exc) from None

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The commands' lines from `SUMMARIES`, without importing any command."""
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(len(name) for name in names)
        rows = [(name, self._summary(ctx, name, limit)) for name in names]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def _summary(self, ctx: click.Context, name: str, limit: int) -> str:
        summary = SUMMARIES.get(name)
        if summary is not None:
            return click.Command(name, help=summary).get_short_help_str(limit)
        command = self.get_command(ctx, name)
        return command.get_short_help_str(limit) if command is not None else ""

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, attr = target.split(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if missing_extra(exc) is None:
                raise
            return _needs_extra(cmd_name, exc)
        command: Any = getattr(module, attr)
        return command

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ModuleNotFoundError as exc:  # imported lazily by the command itself
            if missing_extra(exc) is None:
                raise _one_line(exc) from None
            name = ctx.invoked_subcommand or ctx.info_name or "rlmesh-stream"
            raise click.ClickException(missing_extra_message(name, exc)) from None
        except click.UsageError as exc:
            # names an option or argument; --registry-url is checked without a password
            raise _one_line_usage(exc) from None
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
            raise _one_line(exc) from None


# A group run without a command shows its help: that is not an error to shorten.
_HELP_ERRORS: tuple[type[Exception], ...] = tuple(
    t for t in (getattr(click.exceptions, "NoArgsIsHelpError", None),) if t is not None)


def _one_line_usage(exc: click.UsageError) -> click.UsageError:
    if isinstance(exc, (OneLineUsageError, *_HELP_ERRORS)):
        return exc
    return OneLineUsageError(redact_url(exc.format_message()), exc.ctx)


def _one_line(exc: Exception) -> Exception:
    """What the user sees of an exception no command turned into a message of its own."""
    if os.environ.get("RLMESH_STREAM_TRACEBACK"):
        return exc
    if _is_sink_error(exc):  # a --sink no command caught: its message is the whole story
        return click.ClickException(redact_url(str(exc)))
    if isinstance(exc, OSError) and exc.strerror:  # the file and the system's reason
        where = f" {shown(os.fsdecode(exc.filename))}" if exc.filename is not None else ""
        return click.ClickException(redact_url(f"cannot use{where}: {exc.strerror}"))
    return click.ClickException(redact_url(f"{type(exc).__name__}: {exc}"))


def _is_sink_error(exc: Exception) -> bool:
    """Whether `exc` is a SinkError (`consumers.sinks.url`), without importing that module
    here: only a command that opened a sink can have raised one, and then it is loaded."""
    sinks = sys.modules.get("rlmesh_stream.consumers.sinks.url")
    return sinks is not None and isinstance(exc, sinks.SinkError)


def _needs_extra(name: str, exc: ModuleNotFoundError) -> click.Command:
    """Stands in for a command whose module needs an extra that is not installed."""
    message = missing_extra_message(name, exc)

    @click.command(name, help=message, context_settings={"ignore_unknown_options": True})
    @click.argument("args", nargs=-1, type=click.UNPROCESSED)
    def needs_extra(args: tuple[str, ...]) -> None:
        raise click.ClickException(message)

    return needs_extra


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="rlmesh-stream")
def main() -> None:
    """Stream rlmesh runtime events through Kafka into queryable tables."""


if __name__ == "__main__":
    main()

"""`rlmesh-stream consume <builder>`: run one builder (or `all`) as a consumer process.

Each builder is its own process by default so they scale and fail
independently; `consume all` runs every builder in one process (one read of
each topic) for small deployments and demos.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

import click

from rlmesh_stream.consumers.builders import BUILDER_NAMES, make_builders
from rlmesh_stream.consumers.builders.telemetry import MIN_WINDOW_S
from rlmesh_stream.consumers.cli_options import reading_options
from rlmesh_stream.consumers.runtime import (
    Connection,
    ConsumerError,
    ConsumerRuntime,
    RuntimeOptions,
)
from rlmesh_stream.consumers.sinks import SinkError, SinkURL, open_sink, sink_option
from rlmesh_stream.schemas.cli_values import MAX_SECONDS, FiniteFloatRange, Text
from rlmesh_stream.schemas.connection.access import AccessDeniedError
from rlmesh_stream.schemas.connection.cli_options import stream_options
from rlmesh_stream.schemas.connection.config import StreamConfig

if TYPE_CHECKING:  # imported when used: rich and prometheus_client cost ~0.1 s each
    from rlmesh_stream.consumers.metrics import ConsumerMetrics


@click.group()
def consume() -> None:
    """Build tables from the event topics (DuckDB file or PostgreSQL)."""


def _builder_command(name: str) -> click.Command:
    text = ("Run every builder in one process." if name == "all"
            else f"Run the {name} builder.")

    @click.command(name, help=text)
    @stream_options
    @sink_option()
    @reading_options(default_group=f"rlmesh-stream.{name}", store="sink",
                     until_end_help="Stop once every assigned partition reaches the end "
                                    "seen at start.")
    @click.option("--steps", is_flag=True, help="episodes: also build the per-lane-step table.")
    @click.option("--window", "window_s", default=60.0, show_default=True,
                  type=FiniteFloatRange(min=MIN_WINDOW_S, max=MAX_SECONDS),
                  help="telemetry: tumbling window, seconds.")
    @click.option("--reset-recreated", is_flag=True,
                  help="Read a partition whose stored offset is beyond its end (its topic "
                       "was deleted and recreated) again from its first record [default: "
                       "stop with an error naming it].")
    @click.option("--instance-id", default=None, type=Text(),
                  help="Static group membership id: a restarted process takes over at once.")
    @click.option("--metrics-port", type=click.IntRange(0, 65535), default=None,
                  envvar="RLMESH_STREAM_METRICS_PORT",
                  help="Serve Prometheus metrics on this port (/metrics; 0: a free port; "
                       "the address served is printed). Bind address "
                       "RLMESH_STREAM_METRICS_ADDR, default 0.0.0.0: all interfaces.")
    def command(config: StreamConfig, sink: SinkURL, reading: dict[str, Any], steps: bool,
                window_s: float, reset_recreated: bool, instance_id: str | None,
                quiet: bool, metrics_port: int | None) -> ConsumerRuntime | None:
        builders = make_builders([name], steps=steps, window=timedelta(seconds=window_s))
        reading["group_id"] = reading["group_id"] or f"rlmesh-stream.{name}"
        metrics = _serve_metrics(reading["group_id"], metrics_port)
        options = RuntimeOptions(**reading, instance_id=instance_id,
                                 reset_recreated=reset_recreated)
        connection = Connection(config, options)  # reaches the brokers while the sink opens
        try:
            store = open_sink(sink)
        except SinkError as exc:  # a URL or store that cannot be used: one line, nothing read
            connection.close()
            raise click.ClickException(str(exc)) from None
        progress = None
        if not quiet:
            from rlmesh_stream.consumers.progress import Progress

            progress = Progress(f"consume {name}")
        runtime = None
        try:
            runtime = ConsumerRuntime(config, builders, store, options, progress=progress,
                                      metrics=metrics, connection=connection)
            runtime.run()
        except KeyboardInterrupt:
            pass
        except (AccessDeniedError, ConsumerError) as exc:  # says what to do; no traceback
            raise click.ClickException(str(exc)) from None
        finally:
            if runtime is None:  # not made: its connection, subscribed to nothing, is unused
                connection.close()
            store.close()
            if metrics is not None:
                metrics.close()
        if runtime is not None and runtime.events == 0 and runtime.offsets.stored_any():
            click.echo(_nothing_new(name, sink), err=True)
        return runtime  # its dead letters are counted by `reading_options` (None: not made)

    return command


def _nothing_new(name: str, sink: SinkURL) -> str:
    """Why a run read nothing although the topics hold records: the sink's own offsets (per
    builder, whatever the --group), where an earlier run into the same store stopped."""
    rebuild = (f"delete {sink.path} or consume into another --sink" if sink.path is not None
               else "consume into another database (--sink)")
    return (f"consume {name}: nothing new to read: {sink.shown} already holds this builder's "
            "offsets from an earlier run (offsets are the sink's, whatever --group or "
            f"--from-beginning say); to rebuild its tables, {rebuild}")


def _serve_metrics(group_id: str, port: int | None) -> ConsumerMetrics | None:
    if port is None:
        return None
    from rlmesh_stream.consumers.metrics import ADDR_ENV, ALL_INTERFACES, ConsumerMetrics

    metrics = ConsumerMetrics(group_id)
    try:
        metrics.serve(port)
    except OSError as exc:
        raise click.ClickException(f"cannot serve metrics on port {port}: {exc.strerror}"
                                   ) from None
    # Where, in one line: with --metrics-port 0 the port is known only now.
    addr, bound = metrics.address or (ALL_INTERFACES, port)
    host = f"[{addr}]" if ":" in addr else addr
    where = (f" (all interfaces; set {ADDR_ENV} to bind one)"
             if addr in (ALL_INTERFACES, "::") else "")
    click.echo(f"serving metrics on http://{host}:{bound}/metrics{where}", err=True)
    return metrics


for _name in (*BUILDER_NAMES, "all"):
    consume.add_command(_builder_command(_name))

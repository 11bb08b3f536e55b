"""`rlmesh-stream infra up | down | status | logs | fetch | smoke`: the local stack from a shell.

Errors from the stack (port taken, no suitable java, artifacts not fetchable, a
server that would not start) are printed as one `Error: ...` line that says what
to do, and exit with status 1.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Any

import click

from rlmesh_stream.infra.errors import StackError
from rlmesh_stream.infra.stack import HOME_ENV, LocalStack, StackInfo, default_home
from rlmesh_stream.schemas.cli_values import COUNT_OR_ZERO, PathValue


def _stack_errors(func: Callable[..., Any]) -> Callable[..., Any]:
    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except StackError as exc:
            raise click.ClickException(str(exc)) from None

    return wrapper


PORT = click.IntRange(1, 65535)  # a TCP port
MAX_BROKERS = 9  # a JVM each, on one machine

home_option = click.option(
    "--home", type=PathValue(file_okay=False), envvar=HOME_ENV,
    show_envvar=True, default=None,
    help="Stack directory (data, logs, state). [default: ~/.cache/rlmesh-stream/stack]",
)


def _echo_err(msg: str) -> None:
    click.echo(msg, err=True)


def _print_info(info: StackInfo) -> None:
    for s in info.servers.values():
        where = (f"pid {s.pid}, {s.rss_mib} MiB RSS" if s.running
                 else f"not running from {info.home}, but another process (another home's "
                      "server?) holds its port" if s.port_taken else "not running")
        click.echo(f"{s.name:9} {s.address:45} {where}")
    click.echo(f"bootstrap:    {info.bootstrap}")
    click.echo(f"registry_url: {info.registry_url}")


@click.group()
def infra() -> None:
    """Run the local Kafka + schema registry stack (no Docker needed)."""


@infra.command()
@home_option
@click.option("--kafka-port", type=PORT, envvar="RLMESH_STREAM_KAFKA_PORT", show_envvar=True,
              help="Kafka client port. [default: 9092, or the previous run's]")
@click.option("--registry-port", type=PORT, envvar="RLMESH_STREAM_REGISTRY_PORT",
              show_envvar=True, help="Schema registry port. [default: 8081, or the previous run's]")
@click.option("--controller-port", type=PORT, help="KRaft controller port. [default: free port]")
@click.option("--management-port", type=PORT,
              help="Registry management (health) port. [default: free port]")
@click.option("--brokers", type=click.IntRange(1, MAX_BROKERS), default=1, show_default=True,
              envvar="RLMESH_STREAM_BROKERS", show_envvar=True,
              help="1: one combined node. 3 or more: a KRaft cluster (quorum of 3, topics "
                   "at replication factor 3, min.insync.replicas 2) on --kafka-port and up.")
@_stack_errors
def up(home: Path | None, kafka_port: int | None, registry_port: int | None,
       controller_port: int | None, management_port: int | None, brokers: int) -> None:
    """Start Kafka and the registry (what is not already running) and wait until ready."""
    if brokers > 1:  # the multi-broker cluster lives in infra/cluster.py
        from rlmesh_stream.infra.cluster import cli_up

        cluster = cli_up(home or default_home(), brokers, kafka_port, registry_port, _echo_err)
        click.echo(f"bootstrap:    {cluster.bootstrap}")
        click.echo(f"registry_url: {cluster.registry_url}")
        return
    stack = LocalStack(home, kafka_port=kafka_port, registry_port=registry_port,
                       controller_port=controller_port, management_port=management_port)
    started = time.monotonic()
    info = stack.up(log=_echo_err)
    _echo_err(f"stack ready in {time.monotonic() - started:.1f} s")
    _print_info(info)


@infra.command()
@home_option
@_stack_errors
def down(home: Path | None) -> None:
    """Stop the servers `up` started from this home (and nothing else)."""
    from rlmesh_stream.infra.cluster import cli_down

    stopped = LocalStack(home).down(log=_echo_err) + cli_down(home or default_home(), _echo_err)
    click.echo(f"stopped: {', '.join(stopped)}" if stopped else "nothing was running")


@infra.command()
@home_option
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@_stack_errors
def status(home: Path | None, as_json: bool) -> None:
    """What runs, where, with pids and memory."""
    info = LocalStack(home).status()
    if as_json:
        click.echo(json.dumps(info.to_json(), indent=2))
    else:
        _print_info(info)


@infra.command()
@home_option
@click.option("--server", type=click.Choice(["kafka", "registry", "all"]), default="all",
              show_default=True)
@click.option("-n", "--lines", type=COUNT_OR_ZERO, default=50, show_default=True)
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines (Ctrl-C stops).")
def logs(home: Path | None, server: str, lines: int, follow: bool) -> None:
    """Show the servers' log files."""
    files = {k: v for k, v in LocalStack(home).log_files().items() if server in ("all", k)}
    positions: dict[str, int] = {}
    for name, path in files.items():
        if not path.exists():
            click.echo(f"== {name}: no log yet ({path})")
            positions[name] = 0
            continue
        data = path.read_bytes()
        positions[name] = len(data)
        click.echo(f"== {name}: {path}")
        for line in data.decode(errors="replace").splitlines()[-lines:]:
            click.echo(line)
    while follow:
        time.sleep(0.5)
        for name, path in files.items():
            if path.exists() and path.stat().st_size > positions[name]:
                with open(path, "rb") as fh:
                    fh.seek(positions[name])
                    chunk = fh.read()
                positions[name] += len(chunk)
                for line in chunk.decode(errors="replace").splitlines():
                    click.echo(f"[{name}] {line}")


@infra.command()
@_stack_errors
@click.option("--flink", is_flag=True,
              help="Also Flink's Kafka, Avro-registry and JDBC (PostgreSQL) jars and PyFlink, "
                   "in a venv of its own (for running `schemas sql --engine flink` output "
                   "locally).")
def fetch(flink: bool) -> None:
    """Download Kafka and the registry into the cache (what `up` would do first)."""
    from rlmesh_stream.infra.artifacts import Artifacts
    from rlmesh_stream.infra.java import find_java
    from rlmesh_stream.infra.stack import KAFKA_MIN_JAVA, REGISTRY_MIN_JAVA

    kafka_java = find_java(KAFKA_MIN_JAVA, "Kafka")
    registry_java = find_java(REGISTRY_MIN_JAVA, "Apicurio Registry")
    artifacts = Artifacts.from_env()
    artifacts.ensure()
    click.echo(f"kafka jars:    {artifacts.kafka_libs} (java {kafka_java.major}: "
               f"{kafka_java.path})")
    click.echo(f"registry dist: {artifacts.registry_home} (java {registry_java.major}: "
               f"{registry_java.path})")
    if flink:
        from rlmesh_stream.infra.flink import FlinkArtifacts, flink_java_home

        local = FlinkArtifacts(artifacts)
        local.ensure()
        click.echo(f"flink jars:    {local.jars_dir} (java: {flink_java_home()})")
        click.echo(f"pyflink:       {local.python}")


def _add_smoke() -> None:
    from rlmesh_stream.infra.smoke_cli import smoke

    infra.add_command(smoke)


_add_smoke()

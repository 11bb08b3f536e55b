"""`rlmesh-stream report ...`: fleet reports read from the table store.

Reports only read: they open DuckDB read-only and PostgreSQL in read-only
transactions, so running one next to a live consumer can never corrupt it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from rlmesh_stream.consumers.analysis.reports import (
    FORMATS,
    Report,
    advisory_report,
    delivery_report,
    episode_report,
    gate_failed,
    open_store,
    render,
    telemetry_report,
)
from rlmesh_stream.consumers.analysis.reports.store import Store
from rlmesh_stream.consumers.sinks import SinkError, SinkURL, sink_option
from rlmesh_stream.schemas.cli_values import Text, output_file

GATE_EXIT_CODE = 3
"""Exit status of `report advisories --fail-on` when the gate trips.

Distinct from 1 (the report itself failed) and 2 (bad usage), so an eval
pipeline can tell "the model saw converted data" from "the report broke".
"""


def _common(func: Callable[..., Any]) -> Callable[..., Any]:
    func = click.option("--output", "-o", type=output_file(),
                        help="Write the report to FILE instead of standard output.")(func)
    func = click.option("--format", "fmt", type=click.Choice(FORMATS), default="table",
                        show_default=True, help="Output format.")(func)
    func = sink_option()(func)
    return func


def _run(sink: SinkURL, build: Callable[[Store], Report]) -> Report:
    try:
        with open_store(sink) as store:
            return build(store)
    except SinkError as exc:  # the URL, the store, or a missing table: one line
        raise click.ClickException(str(exc)) from exc


def _emit(report: Report, fmt: str, output: Path | None) -> None:
    if output is not None:
        try:
            output.write_text(render(report, fmt), encoding="utf-8")
        except OSError as exc:
            raise click.ClickException(f"cannot write the report to {output}: "
                                       f"{exc.strerror or exc}") from None
        click.echo(f"wrote {fmt} report to {output}", err=True)
    else:
        color = fmt == "table" and sys.stdout.isatty()
        click.echo(render(report, fmt, color=color), nl=False)


@click.group()
def report() -> None:
    """Reports over the consumed tables (advisories, delivery, episodes, telemetry)."""


@report.command("advisories")
@_common
@click.option("--fail-on", type=click.Choice(["caution", "info"]), default=None,
              help=f"Exit with status {GATE_EXIT_CODE} when any advisory is this severe "
                   "or worse ('info' trips on info and caution).")
@click.option("--env", "envs", multiple=True, type=Text(),
              help="Only this env id (repeatable); default: every env.")
@click.option("--model", "models", multiple=True, type=Text(),
              help="Only this model component id (repeatable); default: every model.")
def advisories_cmd(sink: SinkURL, fmt: str, output: Path | None, fail_on: str | None,
                   envs: tuple[str, ...], models: tuple[str, ...]) -> None:
    """Relay advisories grouped by env, model and leg, caution first."""
    rep = _run(sink, lambda store: advisory_report(store, envs=envs, models=models))
    _emit(rep, fmt, output)
    if gate_failed(rep, fail_on):
        tripped = [r for r in rep.rows if gate_failed(Report(rep.name, "", [], [r]), fail_on)]
        click.echo(f"advisory gate: {len(tripped)} advisory group(s) at '{fail_on}' or worse",
                   err=True)
        sys.exit(GATE_EXIT_CODE)


@report.command("episodes")
@_common
def episodes_cmd(sink: SinkURL, fmt: str, output: Path | None) -> None:
    """Episode counts, success rate, reward and timings per env and model."""
    _emit(_run(sink, episode_report), fmt, output)


@report.command("delivery")
@_common
def delivery_cmd(sink: SinkURL, fmt: str, output: Path | None) -> None:
    """Records, sequence gaps and duplicates per producer id."""
    _emit(_run(sink, delivery_report), fmt, output)


@report.command("telemetry")
@_common
@click.option("--op", "ops", multiple=True, type=Text(),
              help="Only this operation, e.g. model.predict (repeatable).")
@click.option("--metric", "metrics", multiple=True, type=Text(),
              help="Only this metric, e.g. rpc.total (repeatable).")
def telemetry_cmd(sink: SinkURL, fmt: str, output: Path | None, ops: tuple[str, ...],
                  metrics: tuple[str, ...]) -> None:
    """Latency, sizes and counts per env, model and operation, from session snapshots."""
    _emit(_run(sink, lambda store: telemetry_report(store, ops=ops, metrics=metrics)), fmt,
          output)

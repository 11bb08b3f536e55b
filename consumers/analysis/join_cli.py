"""`rlmesh-stream join`: episodes next to the training log that produced their policy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from rlmesh_stream.consumers.analysis.join import (
    LOG_FORMATS,
    TRAIN_PREFIX,
    JoinError,
    JoinResult,
    JoinSpec,
    LogColumns,
    aggregate,
    connect,
    export,
    run_join,
    write_table,
)
from rlmesh_stream.consumers.analysis.reports import FORMATS, Column, Report, render
from rlmesh_stream.consumers.sinks import SinkError, SinkURL, sink_option
from rlmesh_stream.schemas.cli_values import (
    COUNT,
    NON_NEGATIVE,
    PathValue,
    Text,
    output_dir,
    output_file,
)
from rlmesh_stream.schemas.connection.cli_options import stream_options
from rlmesh_stream.schemas.connection.config import StreamConfig

FOLLOW_GROUP = "rlmesh-stream.follow"
FOLLOW_POLL_S = 0.5
"""`--follow` joins its store's episodes with the log every half second: a pass over a few
thousand episodes and a small log takes tens of ms, and TensorBoard's own rescan (1-5 s)
dominates what a user waits for."""


@click.command()
@sink_option("Store URL: duckdb:///path.duckdb, or postgresql://user@host/db (through "
             "DuckDB's postgres extension when installed, else a copy of the episodes).")
@click.option("--log", "log_path", default=None,
              type=PathValue(exists=True),
              help="Training log: JSONL, CSV or Parquet file, or a TensorBoard log directory "
                   "(searched for events.out.tfevents.*; one run per subdirectory) or event "
                   "file.")
@click.option("--mlflow-run", "mlflow_runs", multiple=True, metavar="RUN_ID", type=Text(),
              help="Training log: the metric histories of this MLflow run (repeatable; "
                   "instead of --log).")
@click.option("--mlflow-tracking-uri", envvar="MLFLOW_TRACKING_URI", default=None, type=Text(),
              show_envvar=True,
              help="MLflow tracking store (sqlite:///mlflow.db, a directory, http://server) "
                   "for --mlflow-run and --to-mlflow-run.")
@click.option("--checkpoint-step", default=None, metavar="REGEX", type=Text(),
              help="--by key for step-indexed logs (TensorBoard, MLflow): the regex's first "
                   "group (or group 'step') is the training step in the episode's "
                   r"checkpoint id, e.g. 'ckpt-(\d+)'.")
@click.option("--log-format", type=click.Choice(LOG_FORMATS), default=None,
              help="Format of the log (default: from its suffix).")
@click.option("--by", "mode", type=click.Choice(["key", "asof"]), default="key",
              show_default=True,
              help="key: episode model id = the log's checkpoint; asof: the latest log row "
                   "at or before each episode's time.")
@click.option("--episode-key", default="model_component_id", show_default=True, type=Text(),
              help="Episode column matched to the checkpoint column (--by key).")
@click.option("--episode-time", type=click.Choice(["started_at", "completed_at"]),
              default="started_at", show_default=True,
              help="Episode time matched against the log's time (--by asof).")
@click.option("--match", "asof_match", default=None, metavar="EPISODE_COL=LOG_COL", type=Text(),
              help="--by asof (or --by key with --checkpoint-step): only log rows whose "
                   "LOG_COL equals the episode's EPISODE_COL (e.g. model_component_id=run, "
                   "for actors each following their own run).")
@click.option("--step-column", default="step", show_default=True, type=Text(),
              help="Log column with the training step (the plot's x axis).")
@click.option("--time-column", default="time", show_default=True, type=Text(),
              help="Log column with the wall-clock time of each row (--by asof).")
@click.option("--checkpoint-column", default="checkpoint", show_default=True, type=Text(),
              help="Log column with the checkpoint or model id.")
@click.option("--metric", default="loss", show_default=True, type=Text(allow_empty=True),
              help="Training metric column shown next to each checkpoint: a column, "
                   "TensorBoard tag or MLflow metric, e.g. train/loss ('' for none).")
@click.option("--log-timezone", default=None, type=Text(),
              help="IANA zone of log timestamps written without a UTC offset (e.g. UTC).")
@click.option("--epoch-unit", type=click.Choice(["s", "ms", "us"]), default="s",
              show_default=True, help="Unit of numeric (epoch) log times.")
@click.option("--table", default=None, type=Text(),
              help="Write the joined episodes into the store as this table "
                   "(needs the store's write lock).")
@click.option("--export", "export_path", type=output_file(),
              default=None, help="Write the joined episodes to a .csv or .parquet file.")
@click.option("--plot", "plot_prefix", type=PathValue(output=True, parents=True),
              default=None,
              help="Write PREFIX.png and PREFIX.svg: success and reward per checkpoint "
                   "against training step, the metric on a second axis.")
@click.option("--to-tensorboard", "to_tensorboard", type=output_dir(),
              default=None, help="Write eval/* scalars per checkpoint at its training step "
                                 "into this TensorBoard run directory (replacing the previous "
                                 "join's eval file there).")
@click.option("--to-mlflow-run", "to_mlflow_run", default=None, metavar="RUN_ID", type=Text(),
              help="Log eval/* metrics per checkpoint at its training step into this MLflow "
                   "run (points it already has are skipped).")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table",
              show_default=True, help="Format of the per-checkpoint summary.")
@click.option("--follow", is_flag=True,
              help="Keep running: read the episode topics (its own consumer group, into "
                   "--sink, a DuckDB file only it writes) and the growing log, and write "
                   "each checkpoint's eval point once its evaluation is complete "
                   "(docs/training-logs.md). Stops on SIGTERM or Ctrl-C.")
@click.option("--eval-episodes", type=COUNT, default=None, metavar="N",
              help="--follow: a checkpoint is complete once N of its episodes are final "
                   "[default: once every session that ran it has ended and all its "
                   "episodes are read].")
@click.option("--quiet-seconds", type=NON_NEGATIVE, default=None, metavar="S",
              help="--follow: a checkpoint is also complete once none of its episodes "
                   "changed for S seconds.")
@click.option("--group", "group_id", default=FOLLOW_GROUP, show_default=True, type=Text(),
              help="--follow: its consumer group (offsets stored in --sink).")
@stream_options
def join(config: StreamConfig, sink: SinkURL, log_path: Path | None, mlflow_runs: tuple[str, ...],
         mlflow_tracking_uri: str | None, checkpoint_step: str | None, log_format: str | None,
         mode: str, episode_key: str, episode_time: str, step_column: str, time_column: str,
         checkpoint_column: str, asof_match: str | None, metric: str, log_timezone: str | None,
         epoch_unit: str, table: str | None, export_path: Path | None,
         plot_prefix: Path | None, to_tensorboard: Path | None, to_mlflow_run: str | None,
         fmt: str, follow: bool, eval_episodes: int | None, quiet_seconds: float | None,
         group_id: str) -> None:
    """Join the episode table with a training log and summarise per checkpoint.

    With --follow, keep running and write each checkpoint's eval point as soon as its
    evaluation is complete.
    """
    if (log_path is None) == (not mlflow_runs):
        raise click.UsageError("give the training log as --log PATH or --mlflow-run RUN_ID "
                               "(one of the two)")
    if not follow and (eval_episodes is not None or quiet_seconds is not None):
        raise click.UsageError("--eval-episodes and --quiet-seconds apply to --follow")
    if follow:
        if table or export_path or plot_prefix:
            raise click.UsageError("--follow writes eval points only: drop --table, "
                                   "--export and --plot (run `join` without --follow)")
        if to_tensorboard is None and to_mlflow_run is None:
            raise click.UsageError("--follow needs --to-tensorboard DIR and/or "
                                   "--to-mlflow-run RUN_ID")
        if sink.path is None:
            raise click.UsageError("--follow reads the topics into a DuckDB file of its own: "
                                   "--sink duckdb:///path/follow.duckdb")
    if checkpoint_step is not None and mode != "key":
        raise click.UsageError("--checkpoint-step applies to --by key")
    if plot_prefix:  # before any work: without matplotlib, say so now (infra/cli.py)
        from rlmesh_stream.consumers.analysis.plots import plot_checkpoints
    match: tuple[str, str] | None = None
    if asof_match is not None:
        episode_col, sep, log_col = asof_match.partition("=")
        if not sep or not episode_col or not log_col:
            raise click.BadParameter("use EPISODE_COL=LOG_COL", param_hint="--match")
        match = (episode_col, log_col)
    spec = JoinSpec(
        mode="key" if mode == "key" else "asof",
        log=log_path,
        columns=LogColumns(step_column, time_column, checkpoint_column, metric or None),
        log_format=log_format,
        episode_key=episode_key,
        episode_time="completed_at" if episode_time == "completed_at" else "started_at",
        log_timezone=log_timezone,
        epoch_unit=epoch_unit,
        asof_match=match,
        checkpoint_step=checkpoint_step,
        mlflow_runs=mlflow_runs,
        mlflow_tracking_uri=mlflow_tracking_uri,
    )
    if follow:
        assert sink.path is not None
        _follow(config, sink.path, spec, to_tensorboard, to_mlflow_run, mlflow_tracking_uri,
                eval_episodes, quiet_seconds, group_id)
        return
    try:
        con = connect(sink, writable=table is not None)
    except SinkError as exc:
        raise click.ClickException(str(exc)) from exc
    try:
        result = run_join(con, spec)
        rows = aggregate(con, spec, result)
        if table:
            write_table(con, table, sink)
        if export_path:
            export(con, export_path)
        written = write_back(rows, to_tensorboard, to_mlflow_run, mlflow_tracking_uri)
    except JoinError as exc:
        raise click.ClickException(str(exc)) from exc
    finally:
        con.close()

    click.echo(result.summary(), err=True)
    for note in result.notes:
        click.echo(f"note: {note}", err=True)
    if table:
        click.echo(f"wrote table {table} ({result.matched} rows) to the store", err=True)
    if export_path:
        click.echo(f"exported {result.matched} joined episodes to {export_path}", err=True)
    if plot_prefix:
        paths = plot_checkpoints(rows, plot_prefix, metric_name=spec.columns.metric,
                                 title=f"Evaluation vs training ({spec.log_name})")
        click.echo("wrote plot " + ", ".join(str(p) for p in paths), err=True)
    for line in written:
        click.echo(line, err=True)
    click.echo(render(checkpoint_report(rows, spec, result), fmt), nl=False)


def _follow(config: StreamConfig, store: Path, spec: JoinSpec, to_tensorboard: Path | None,
            to_mlflow_run: str | None, tracking_uri: str | None, eval_episodes: int | None,
            quiet_seconds: float | None, group_id: str) -> None:
    """`join --follow`: until SIGTERM; its status lines on stderr."""
    from rlmesh_stream.consumers.analysis import follow as fl
    from rlmesh_stream.consumers.analysis.training_logs import TrainingLogError
    from rlmesh_stream.consumers.runtime import ConsumerError

    def say(text: str) -> None:
        click.echo(f"follow: {text}", err=True)

    try:
        outputs: list[fl.Output] = []
        if to_tensorboard is not None:
            outputs.append(fl.TensorBoardOutput(to_tensorboard))
        if to_mlflow_run is not None:
            outputs.append(fl.MlflowOutput(to_mlflow_run, tracking_uri))
        follower = fl.Follower(spec, outputs, fl.Rule(eval_episodes, quiet_seconds), say)
        fl.follow(config, store, follower, group_id=group_id, poll_s=FOLLOW_POLL_S)
    except ImportError as exc:
        raise click.ClickException(f"--follow needs {exc.name}: pip install "
                                   "'rlmesh-stream[training-logs]'") from exc
    except (TrainingLogError, JoinError, SinkError, ConsumerError) as exc:
        raise click.ClickException(str(exc)) from exc
    except KeyboardInterrupt:
        pass
    say(f"stopped: {follower.points} checkpoint(s) written by this run")
    for name, count in sorted(follower.late().items()):
        say(f"late: {count} episode(s) of {name} arrived after its point was written and "
            "are not in it (a batch `join` counts them)")


def write_back(rows: list[dict[str, Any]], to_tensorboard: Path | None,
               to_mlflow_run: str | None, tracking_uri: str | None) -> list[str]:
    """Write the per-checkpoint eval metrics into TensorBoard / MLflow; lines to print."""
    if to_tensorboard is None and to_mlflow_run is None:
        return []
    from rlmesh_stream.consumers.analysis.training_logs import TrainingLogError
    from rlmesh_stream.consumers.analysis.training_logs import writeback as wb

    lines: list[str] = []
    try:
        points = wb.eval_points(rows)
        if points.without_step:
            lines.append(f"note: {len(points.without_step)} checkpoint(s) have no training "
                         f"step and were not written back: {points.without_step[:5]}")
        done = []
        if to_tensorboard is not None:
            done.append(wb.write_tensorboard(points, to_tensorboard))
        if to_mlflow_run is not None:
            done.append(wb.write_mlflow(points, to_mlflow_run, tracking_uri))
    except ImportError as exc:
        raise JoinError(f"writing eval results back needs {exc.name}: pip install "
                        "'rlmesh-stream[training-logs]'") from exc
    except TrainingLogError as exc:
        raise JoinError(str(exc)) from exc
    for w in done:
        line = f"wrote {w.points} eval points ({len(points.by_step)} checkpoints) to {w.where}"
        if w.skipped or w.differing:
            line += f"; {w.skipped} already there were skipped"
        if w.differing:
            line += (f", {w.differing} already there with another value were kept (MLflow "
                     "metric history is append-only: log to a new run to replace them)")
        lines.append(line)
    return lines


def checkpoint_report(rows: list[dict[str, Any]], spec: JoinSpec,
                      result: JoinResult) -> Report:
    """The per-checkpoint aggregate as a report, rendered like the other reports."""
    label = spec.columns.metric or "metric"
    by_step = result.group_column == TRAIN_PREFIX + spec.columns.step
    group = ("Run/log step" if result.group_run else "Log step") if by_step else "Checkpoint"
    return Report(
        name="join",
        title="Episodes per checkpoint",
        columns=[
            Column("checkpoint", group),
            Column("step", "Training step", "right", "int"),
            Column("metric", label, "right", "float"),
            Column("episodes", "Episodes", "right", "int"),
            Column("completed", "Completed", "right", "int"),
            Column("success_rate", "Success", "right", "percent"),
            Column("mean_reward", "Mean reward", "right", "float"),
            Column("std_reward", "Std reward", "right", "float"),
            Column("mean_step_ms", "Mean step ms", "right", "float"),
        ],
        rows=[dict(r) for r in rows],
        empty_message="No episode matched the training log.",
    )

"""`rlmesh-stream export trajectories`: the stream's episodes as a Minari or Parquet dataset;
`export certificate`: an export's certificate, read from its directory."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from rlmesh_stream.consumers.cli_options import reading_options
from rlmesh_stream.consumers.datasets import DEFAULT_MAX_HELD_STEPS
from rlmesh_stream.schemas.cli_values import COUNT, FiniteFloatRange, PathValue, Text, output_dir
from rlmesh_stream.schemas.connection.access import AccessDeniedError
from rlmesh_stream.schemas.connection.cli_options import stream_options
from rlmesh_stream.schemas.connection.config import StreamConfig
from rlmesh_stream.schemas.connection.redact import redact_secrets, redact_url

if TYPE_CHECKING:
    from rlmesh_stream.consumers.runtime import ConsumerRuntime

# A Minari dataset id names folders (NAMESPACE/NAME-vN), and the default group holds it:
# far below any file system's 255 bytes per name.
MAX_DATASET_ID_CHARS = 200


@click.group()
def export() -> None:
    """Export the event history as datasets."""


@export.command("trajectories")
@stream_options
@click.option("--out", "out", default=None, type=output_dir(dataset=True),
              help="Dataset directory (MINARI_DATASETS_PATH for --format minari).")
@click.option("--format", "fmt", type=click.Choice(["minari", "parquet", "iceberg"]),
              required=True)
@click.option("--catalog", default=None, type=Text(),
              help="--format iceberg: the SQL catalog, sqlite:///PATH or postgresql://...")
@click.option("--table", default=None, type=Text(),
              help="--format iceberg: NAMESPACE.NAME (tables NAME_episodes and NAME_steps, "
                   "and NAME_steps_<env> for an env whose observation/action columns have "
                   "other types).")
@click.option("--warehouse", default=None, type=Text(),
              help="--format iceberg: where the tables' files go (a directory or s3://...) "
                   "[default, sqlite: DIR/warehouse beside the catalog file].")
@click.option("--dataset-id", default="rlmesh/trajectories-v0", show_default=True,
              type=Text(max_chars=MAX_DATASET_ID_CHARS),
              help="Minari dataset id [NAMESPACE/]NAME-vN; with {env} in it (rlmesh/{env}-v0) "
                   "one dataset per env.")
@click.option("--minari-format", type=click.Choice(["hdf5", "arrow"]), default="hdf5",
              show_default=True,
              help="Minari's storage layout (hdf5: Minari's default, as DataCollector writes; "
                   "arrow: a directory per episode).")
@click.option("--author", "authors", multiple=True, type=Text(),
              help="Minari metadata: the dataset's author (repeatable).")
@click.option("--author-email", "author_emails", multiple=True, type=Text(),
              help="Minari metadata: an author's email (repeatable).")
@click.option("--code-permalink", default=None, type=Text(),
              help="Minari metadata: a link to the code that produced the episodes.")
@click.option("--algorithm-name", default=None, type=Text(),
              help="Minari metadata: the policy's algorithm [default: the model ids].")
@click.option("--description", default=None, type=Text(multiline=True, max_chars=10_000),
              help="Minari metadata: the dataset's description.")
@click.option("--ref-min-score", type=FiniteFloatRange(), default=None,
              help="Minari metadata: a random policy's return (minari.get_normalized_score).")
@click.option("--ref-max-score", type=FiniteFloatRange(), default=None,
              help="Minari metadata: an expert policy's return (minari.get_normalized_score).")
@click.option("--max-episode-steps", type=COUNT, default=None,
              help="The step limit of the dataset's env spec (else the producer's, else "
                   "Gymnasium's registration).")
@click.option("--max-held-steps", type=COUNT, default=DEFAULT_MAX_HELD_STEPS,
              show_default=True,
              help="The memory bound: steps a running session's episodes may hold before its "
                   "whole ones are written without waiting for its end (a vector-env "
                   "session's: lane steps); an episode of a single-lane session longer "
                   "than this is skipped (too_long). About 530 bytes a step of 4 floats.")
@click.option("--trust-env-spec", is_flag=True,
              help="--format minari: take every producer's env spec as it is, even one the "
                   "local Gymnasium registry would not make (its entry points run when the "
                   "dataset's env is recovered): only if you own every producer.")
@reading_options(default_group="rlmesh-stream.export.<dataset id>.<digest of --out>",
                 store="dataset",
                 until_end_help="Stop at the end seen at start, and decide on every episode "
                                "still open.")
@click.option("--env-id", "env_ids", multiple=True, type=Text(),
              help="Only these env ids (repeatable).")
@click.option("--model", "models", multiple=True, type=Text(),
              help="Only these model component ids (repeatable).")
@click.option("--include-abandoned", is_flag=True,
              help="Also export the episodes of failed sessions, flagged abandoned.")
@click.option("--exclude-caution", is_flag=True,
              help="Leave out sessions with a caution relay advisory (else they are tagged).")
def trajectories(config: StreamConfig, out: Path | None, fmt: str, catalog: str | None,
                 table: str | None, warehouse: str | None, dataset_id: str,
                 minari_format: str, authors: tuple[str, ...], author_emails: tuple[str, ...],
                 code_permalink: str | None, algorithm_name: str | None,
                 description: str | None, ref_min_score: float | None,
                 ref_max_score: float | None, max_episode_steps: int | None,
                 max_held_steps: int, trust_env_spec: bool,
                 reading: dict[str, Any],
                 env_ids: tuple[str, ...], models: tuple[str, ...],
                 include_abandoned: bool, exclude_caution: bool, quiet: bool
                 ) -> ConsumerRuntime | None:
    """Join the step, action, observation and episode events into whole episodes."""
    # A library missing here is named, with its extra, by the root command.
    from rlmesh_stream.consumers.datasets.episodes import Filters
    from rlmesh_stream.consumers.datasets.export import (
        DatasetError,
        ExportOptions,
        check_dataset_id,
        default_group,
        run_export,
    )
    from rlmesh_stream.consumers.progress import Progress
    from rlmesh_stream.consumers.runtime import ConsumerError, RuntimeOptions

    try:
        target = _target(fmt, out, catalog, table, warehouse)
        if target is None:
            assert out is not None
            check_dataset_id(dataset_id, out)
            reading["group_id"] = reading["group_id"] or default_group(dataset_id,
                                                                       str(out.resolve()))
        else:
            reading["group_id"] = reading["group_id"] or default_group(
                target.table, target.catalog)
        if (ref_min_score is None) != (ref_max_score is None):
            raise click.UsageError("--ref-min-score and --ref-max-score go together "
                                   "(minari.get_normalized_score needs both)")
        options = ExportOptions(out=out, fmt=fmt, dataset_id=dataset_id, filters=Filters(
            env_ids=env_ids, models=models, include_abandoned=include_abandoned,
            exclude_caution=exclude_caution), minari_format=minari_format,
            max_episode_steps=max_episode_steps, max_held_steps=max_held_steps,
            trust_env_spec=trust_env_spec,
            iceberg=target, group=reading["group_id"],
            minari_metadata={
                "author": authors, "author_email": author_emails,
                "code_permalink": code_permalink, "algorithm_name": algorithm_name,
                "description": description, "ref_min_score": ref_min_score,
                "ref_max_score": ref_max_score})
        runtime_options = RuntimeOptions(**reading)
        progress = None if quiet else Progress("export trajectories")
        sink, runtime = run_export(config, options, runtime_options, progress=progress)
    except (DatasetError, AccessDeniedError, ConsumerError) as exc:  # as `consume` does
        # a client's words about a --catalog it could not parse quote pieces of it
        raise click.ClickException(redact_secrets(str(exc), catalog or "")) from None
    except KeyboardInterrupt:
        return None
    cert = sink.certificate_summary()
    click.echo(json.dumps({k: cert.get(k) for k in (
        "episodes_exported", "steps_exported", "episodes_skipped", "gaps", "duplicates",
        "dead_letters", *(("env_spec", "env_specs_dropped") if fmt == "minari" else ()))},
        sort_keys=True))
    dropped = sum((cert.get("env_specs_dropped") or {}).values())
    if dropped:
        click.echo(f"warning: {dropped} episode(s) kept without their producer's env spec "
                   f"(env_spec:untrusted), e.g. {cert.get('env_spec_dropped_example')}; the "
                   "dataset's env spec is Gymnasium's registration of the env id. "
                   "--trust-env-spec takes producers' specs as they are (only if you own "
                   "every producer)", err=True)
    if target is not None:
        click.echo(f"read it: python -c \"from pyiceberg.catalog.sql import SqlCatalog; "
                   f"c = SqlCatalog('rlmesh', uri='{redact_url(target.catalog)}'); "
                   f"print(c.load_table('{target.table}_episodes').scan().to_arrow())\"")
        from rlmesh_stream.consumers.datasets.iceberg_sink import ShardedSink

        assert isinstance(sink, ShardedSink)
        for line in steps_table_lines(sink.envs_by_steps_table(), f"{target.table}_steps"):
            click.echo(line)
    for line in skipped_lines(cert.get("episodes_skipped") or {}):
        click.echo(line)
    if fmt == "minari":
        for loaded in sink.dataset_ids():
            click.echo(f"load it: MINARI_DATASETS_PATH={out} python -c \"import minari; "
                       f"print(minari.load_dataset('{loaded}'))\"")
    return runtime  # its dead letters are counted by `reading_options`


@export.command("certificate")
@click.argument("out", type=PathValue(file_okay=False, exists=True))
def certificate(out: Path) -> None:
    """Print the completeness certificate of a Minari or Parquet export in OUT (its --out),
    each producer's figures included, as its last commit left it (an export may be
    running there)."""
    from rlmesh_stream.consumers.datasets.manifest import DatasetError
    from rlmesh_stream.consumers.datasets.state import read_certificate

    try:
        cert = read_certificate(out)
    except DatasetError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(json.dumps(cert, indent=1, sort_keys=True))


# Per skip reason: why, and what keeps such episodes (the flag, or the producer's fix).
SKIP_HINTS = {
    "no_terminal_observation": "published without their terminal observation (Minari needs "
                               "T+1): wrap the env with bridge.wrap(env) in the producer; "
                               "--format parquet keeps them as they are",
    "filtered": "left out by --env-id / --model",
    "abandoned": "their session failed before they completed: --include-abandoned keeps "
                 "them, flagged",
    "caution": "their session had a caution advisory: without --exclude-caution they are "
               "kept, tagged",
    "incomplete": "an event of theirs is missing, or they were still open at the end: a "
                  "later run finishes those still open",
    "space_mismatch": "other spaces than the dataset's: a --dataset-id with {env} "
                      "(rlmesh/{env}-v0) writes one dataset per env",
    "env_spec_mismatch": "run under another env spec than the dataset's: export them under "
                         "another --dataset-id (--env-id, --model or --max-episode-steps "
                         "to pick them)",
    "space_changed": "a space changed in the middle of the episode: no flag keeps them",
    "bad_leaves": "bytes that do not fit their SpaceSpec (skip_examples in the manifest): "
                  "a producer's fault, no flag keeps them",
    "misaligned": "an event of their vector-env session is missing or dead-lettered: no "
                  "flag keeps them",
    "no_reset_observation": "no reset observation was published: no flag keeps them",
    "empty": "no steps",
    "too_long": "longer than --max-held-steps (never held whole in memory): raise it",
    "observation_leaves_omitted": "the producer's size cap dropped their leaves: raise its "
                                  "leaves_max_bytes",
    "action_leaves_omitted": "the producer's size cap dropped their leaves: raise its "
                             "leaves_max_bytes",
}


def skipped_lines(skipped: dict[str, int]) -> list[str]:
    """One line per skip reason with episodes: the count, why, and what would keep them."""
    out = []
    for reason, count in sorted(skipped.items()):
        if not count:
            continue
        hint = SKIP_HINTS.get(reason, "see docs/datasets.md")
        out.append(f"skipped {count} episode{'s' if count != 1 else ''} "
                   f"({reason}): {hint}")
    return out


def steps_table_lines(tables: dict[str, list[str]], main: str) -> list[str]:
    """Where each env's steps are, when the Iceberg export holds more than one steps table
    (an env whose observation or action columns have other types than the main table's)."""
    if set(tables) <= {main}:
        return []
    return [f"steps of {', '.join(envs)} in {name}"
            + ("" if name == main else f" (observation/action columns of other types than "
                                       f"{main}')")
            for name, envs in sorted(tables.items(), key=lambda kv: (kv[0] != main, kv[0]))]


def _target(fmt: str, out: Path | None, catalog: str | None, table: str | None,
            warehouse: str | None) -> Any:
    """The Iceberg target of --format iceberg (None for a directory format); a usage error
    for options that do not go with the format."""
    if fmt != "iceberg":
        if out is None:
            raise click.UsageError(f"--format {fmt} needs --out DIR")
        if catalog or table or warehouse:
            raise click.UsageError("--catalog, --table and --warehouse go with --format iceberg")
        return None
    if out is not None:
        raise click.UsageError("--format iceberg writes to --catalog and --table, not --out")
    if not catalog or not table:
        raise click.UsageError("--format iceberg needs --catalog URI and --table NAMESPACE.NAME")
    try:
        from rlmesh_stream.consumers.datasets.iceberg import IcebergTarget, check_target
    except ModuleNotFoundError as exc:
        raise click.ClickException(
            f"--format iceberg needs the 'iceberg' extra ({exc.name} is not installed): "
            "pip install 'rlmesh-stream[iceberg]'") from None

    target = IcebergTarget(catalog, table, warehouse)
    check_target(target)
    return target

"""`rlmesh-stream schemas ...`: register, check and document the event contract.

`register` is idempotent (the registry returns the existing id for a schema it
already holds) and sets BACKWARD compatibility on every subject. `check` asks
the registry whether each local schema can read what the subject holds, then
checks every registered version against the consumers' reader itself (the
registry's answer covers only its compatibility level: nothing under NONE);
when one cannot be read it names the subject, the version and the offending
fields, and exits 1, so a deploy pipeline can gate on it.
"""

from __future__ import annotations

import json
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import click
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from rlmesh_stream.schemas.cli_values import MAX_SECONDS, FiniteFloatRange, Text, output_dir
from rlmesh_stream.schemas.connection.cli_options import stream_options
from rlmesh_stream.schemas.connection.config import StreamConfig
from rlmesh_stream.schemas.contract.avro import load_schema
from rlmesh_stream.schemas.contract.errors import (
    RegistryProtocolError,
    RegistryUnavailableError,
    SchemaNotRegisteredError,
    SubjectFormatError,
)
from rlmesh_stream.schemas.contract.topics import EVENT_TYPES, EventType
from rlmesh_stream.schemas.registry import client as registry
from rlmesh_stream.schemas.registry.compat import avro_incompatibilities, proto_incompatibilities
from rlmesh_stream.schemas.registry.proto_defs import proto_text
from rlmesh_stream.schemas.registry.registrar import SchemaRegistrar
from rlmesh_stream.schemas.registry.schema_defs import registry_schema

_FORMAT = click.option("--format", "fmt", type=click.Choice(["avro", "protobuf"]),
                       default="avro", show_default=True, help="Wire format of the topics.")


@click.group("schemas")
def schemas() -> None:
    """Register, check and document the event schemas."""


@schemas.command("register")
@stream_options
@_FORMAT
def register(config: StreamConfig, fmt: str) -> None:
    """Register every event schema under its topic's subject (BACKWARD compatibility)."""
    client = SchemaRegistryClient(config.registry_config())
    registrar = SchemaRegistrar(client, fmt, config.topic_prefix)  # type: ignore[arg-type]
    for et in EVENT_TYPES:
        subject = registrar.subject(et)
        try:
            sid = registrar.schema_id(et)
        except (RegistryUnavailableError, RegistryProtocolError, SubjectFormatError) as exc:
            raise click.ClickException(str(exc)) from None
        except SchemaRegistryError as exc:
            raise click.ClickException(f"{subject}: registration refused: {exc}") from exc
        click.echo(f"{subject}\tid {sid}\tBACKWARD")


@schemas.command("check")
@stream_options
@_FORMAT
def check(config: StreamConfig, fmt: str) -> None:
    """Check the local schemas can read what the registry holds; exit 1 naming what cannot."""
    client = SchemaRegistryClient(config.registry_config())
    registrar = SchemaRegistrar(client, fmt, config.topic_prefix,  # type: ignore[arg-type]
                                auto_register=False)
    failed = 0
    for et in EVENT_TYPES:
        subject = registrar.subject(et)
        try:
            status, problems = _check_one(client, registrar, et, fmt)
        except (RegistryUnavailableError, RegistryProtocolError) as exc:
            raise click.ClickException(str(exc)) from None
        click.echo(f"{subject}\t{status}")
        for problem in problems:
            click.echo(f"  {subject}: {problem}")
        failed += status == "INCOMPATIBLE"
    if failed:
        click.echo(f"{failed} subject(s) incompatible with the local schemas", err=True)
        sys.exit(1)


def _check_one(client: Any, registrar: SchemaRegistrar, et: EventType, fmt: str
               ) -> tuple[str, list[str]]:
    subject = registrar.subject(et)
    try:
        latest = registry.call(f"read {subject}", client.get_latest_version, subject)
    except SchemaRegistryError as exc:
        if registry.is_not_found(exc):
            return "not registered", []
        raise
    try:
        ours = registry_schema(client, et, fmt, register=False)  # type: ignore[arg-type]
    except SchemaNotRegisteredError as exc:
        return "INCOMPATIBLE", [str(exc)]
    held = str(latest.schema.schema_str)
    mine = str(ours.schema_str)
    try:
        ok = registry.call(f"test {subject}", client.test_compatibility, subject, ours)
    except SchemaRegistryError as exc:
        # Apicurio's ccompat API answers 422 to a compatibility test of a protobuf
        # schema with references; fall back to our field-number check.
        if fmt != "protobuf" or exc.http_status_code != 422:
            raise
        local = proto_incompatibilities(mine, held, et.event_class.__name__)
        if local:
            return "INCOMPATIBLE", local
        ok = True
    if ok:  # the registry's word covers its compatibility level only (none under NONE)
        unreadable = _unreadable_versions(client, subject, et)
        if unreadable:
            return "INCOMPATIBLE", unreadable
        return ("current" if _is_latest(client, subject, ours, latest.version)
                else "compatible"), []
    if fmt == "avro":
        problems = avro_incompatibilities(json.loads(mine), json.loads(held))
    else:
        problems = proto_incompatibilities(mine, held, et.event_class.__name__)
    return "INCOMPATIBLE", problems or [
        f"the registry refuses our schema against version {latest.version} "
        "(no field-level difference found)"]


def _unreadable_versions(client: Any, subject: str, et: EventType) -> list[str]:
    """What the consumers cannot read in each version the subject holds, whatever the
    registry's compatibility level let in: every version's records may still be in the
    topic, and the consumers read each by its own schema, in either format (Avro by the
    resolution rules to our `.avsc`, protobuf by field number against our `.proto`)."""
    problems: list[str] = []
    for version in registry.call(f"list {subject}", client.get_versions, subject):
        held = registry.call(f"read {subject} version {version}", client.get_version,
                             subject, version).schema
        if (held.schema_type or "AVRO").upper() == "AVRO":
            found = avro_incompatibilities(load_schema(et), json.loads(held.schema_str))
        else:
            found = proto_incompatibilities(proto_text(et), str(held.schema_str),
                                            et.event_class.__name__)
        problems += [f"version {version}: {p}" for p in found]
    return problems


def _is_latest(client: Any, subject: str, ours: Any, latest_version: int) -> bool:
    """Whether the subject's latest version is our schema (registries reformat the text)."""
    try:
        found = registry.call(f"look up {subject}", client.lookup_schema, subject, ours)
    except SchemaRegistryError as exc:
        if registry.is_not_found(exc):
            return False
        raise
    return bool(found.version == latest_version)


@schemas.command("catalog")
@click.option("--check", "check_only", is_flag=True,
              help="Exit 1 if docs/topic-catalog.md is not current.")
def catalog(check_only: bool) -> None:
    """Write docs/topic-catalog.md from the schemas."""
    from rlmesh_stream.schemas.contract.catalog import main

    sys.exit(main(["--check"] if check_only else []))


@schemas.command("sql")
@click.option("--engine", type=click.Choice(["flink", "spark"]), required=True,
              help="Flink SQL CREATE TABLEs (and a view per consumer table), or Spark reader "
                   "schemas and a read snippet.")
@click.option("--out", "out_dir", type=output_dir(),
              help="Write one file per topic here instead of printing.")
@click.option("--bounded", is_flag=True,
              help="Flink: stop at the end offsets seen at job start (a batch read).")
@click.option("--jdbc-url", metavar="URL", type=Text(),
              help="Flink: also write sinks.sql (every view upserted into PostgreSQL at this "
                   "JDBC URL by a streaming job) and postgres_tables.sql (its tables).")
@click.option("--window", "window_s", default=60.0, show_default=True,
              type=FiniteFloatRange(min=0, min_open=True, max=MAX_SECONDS),
              help="Flink: the telemetry_rollups view's tumbling window, seconds (as "
                   "`consume telemetry --window`).")
@stream_options
def sql(config: StreamConfig, engine: str, out_dir: Path | None, bounded: bool,
        jdbc_url: str | None, window_s: float) -> None:
    """Generate the DDL (or reader schemas) another engine needs to read the topics."""
    from rlmesh_stream.schemas.engines import files

    if jdbc_url and engine != "flink":
        raise click.UsageError("--jdbc-url writes Flink sinks: it needs --engine flink")
    outputs = (files.flink_files(config, bounded) if engine == "flink"
               else files.spark_files(config))
    if engine == "flink":
        # The views are the consumers' table definitions rendered for Flink, so they
        # live with the tables (consumers/flink/); only this command reaches for them.
        from rlmesh_stream.consumers.flink import sink_files, view_files

        window = timedelta(seconds=window_s)
        try:
            outputs.update(view_files(window))
        except ValueError as exc:  # a window the views cannot compute
            raise click.BadParameter(str(exc), param_hint="--window") from None
        if jdbc_url:
            outputs.update(sink_files(jdbc_url, window))
    if out_dir is None:
        click.echo("\n\n".join(outputs.values()))
        return
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        for name, text in outputs.items():
            (out_dir / name).write_text(text + "\n", encoding="utf-8")
    except OSError as exc:
        raise click.ClickException(f"cannot write to {out_dir}: {exc.strerror}") from exc
    click.echo(f"wrote {len(outputs)} files to {out_dir}")

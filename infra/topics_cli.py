"""`rlmesh-stream topics create`: the event topics, idempotently, with drift reported.

Exit status: 0 when every topic exists with the wanted settings (created now or
before), 3 when some existing topic differs (drift is reported, nothing is changed).
"""

from __future__ import annotations

import click

from rlmesh_stream.infra.topics import (
    DEFAULT_MAX_MESSAGE_BYTES,
    DEFAULT_PARTITIONS,
    DEFAULT_RETENTION_MS,
    MIN_MAX_MESSAGE_BYTES,
    TopicsError,
    ensure_topics,
)
from rlmesh_stream.schemas.connection.cli_options import stream_options
from rlmesh_stream.schemas.connection.config import StreamConfig

DRIFT_EXIT_CODE = 3
# The largest values librdkafka and Kafka take: librdkafka refuses more partitions or
# replicas than these (RD_KAFKAP_PARTITIONS_MAX, RD_KAFKAP_BROKERS_MAX) with a raw
# ValueError; retention.ms is a Java long, max.message.bytes a Java int.
MAX_PARTITIONS = 100_000
MAX_REPLICATION_FACTOR = 10_000
MAX_LONG = 2**63 - 1
MAX_INT = 2**31 - 1


@click.group()
def topics() -> None:
    """Manage the event topics."""


@topics.command()
@stream_options
@click.option("--partitions", type=click.IntRange(1, MAX_PARTITIONS), default=DEFAULT_PARTITIONS,
              show_default=True)
@click.option("--replication-factor", type=click.IntRange(1, MAX_REPLICATION_FACTOR),
              default=None,
              help="[default: min(3, live brokers)]")
@click.option("--retention-ms", type=click.IntRange(-1, MAX_LONG), default=DEFAULT_RETENTION_MS,
              show_default=True, help="How long records are kept; -1: forever.")
@click.option("--max-message-bytes", type=click.IntRange(MIN_MAX_MESSAGE_BYTES, MAX_INT),
              default=DEFAULT_MAX_MESSAGE_BYTES, show_default=True,
              help="Largest record batch a topic accepts.")
def create(config: StreamConfig, partitions: int, replication_factor: int | None,
           retention_ms: int, max_message_bytes: int) -> None:
    """Create the event topics under --topic-prefix; existing ones are checked, not changed."""
    try:
        report = ensure_topics(config, partitions=partitions,
                               replication_factor=replication_factor,
                               retention_ms=retention_ms, max_message_bytes=max_message_bytes)
    except TopicsError as exc:
        raise click.ClickException(str(exc)) from None
    for name in report.created:
        click.echo(f"created   {name}")
    for name in report.unchanged:
        click.echo(f"exists    {name}")
    for drift in report.drift:
        click.echo(f"DRIFT     {drift}", err=True)
    click.echo(f"{len(report.created)} created, {len(report.unchanged)} unchanged, "
               f"{len(report.drifted_topics)} drifted")
    if report.drift:
        raise SystemExit(DRIFT_EXIT_CODE)

"""Sinks: where the consumers write their tables, opened from a `--sink` URL.

`Sink` is the contract the consumer runtime writes through (the dataset export's sink
implements it too); `TableSink` is DuckDB's and PostgreSQL's. `open_sink` is the writer's
door; the URL rules and every refusal live in
`sinks.url`, which the reports and the join open their stores through as well. The
commands receive `--sink` already parsed (a `SinkURL`); a string is parsed here.
"""

from __future__ import annotations

from rlmesh_stream.consumers.sinks.base import (
    ForeignTableError,
    OffsetConflict,
    OffsetUpdate,
    Sink,
    SinkBatch,
    TableSink,
)
from rlmesh_stream.consumers.sinks.url import (
    DEFAULT_SINK,
    SinkError,
    SinkURL,
    as_sink_url,
    parse_sink_url,
    sink_option,
)


def open_sink(url: SinkURL | str) -> TableSink:
    """Open (and migrate) the sink a `--sink` URL names; SinkError when it cannot be used."""
    target = as_sink_url(url)
    sink: TableSink
    if target.path is not None:
        from rlmesh_stream.consumers.sinks.duckdb_sink import DuckDBSink

        sink = DuckDBSink(target.path)
    else:
        from rlmesh_stream.consumers.sinks.postgres_sink import PostgresSink

        sink = PostgresSink(target.url)
    try:
        sink.migrate()
    except BaseException:
        sink.close()
        raise
    return sink


__all__ = [
    "DEFAULT_SINK",
    "ForeignTableError",
    "OffsetConflict",
    "OffsetUpdate",
    "Sink",
    "SinkBatch",
    "SinkError",
    "SinkURL",
    "TableSink",
    "as_sink_url",
    "open_sink",
    "parse_sink_url",
    "sink_option",
]

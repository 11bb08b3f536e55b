"""Sinks by URL: `duckdb:///path.duckdb` (the embedded default) or `postgresql://...`."""

from __future__ import annotations

from pathlib import Path

from rlmesh_stream.consumers.sinks.base import OffsetConflict, OffsetUpdate, Sink, SinkBatch

DEFAULT_SINK = f"duckdb://{Path.cwd() / 'rlmesh.duckdb'}"
"""The store every command uses unless told otherwise: `rlmesh.duckdb` in the working
directory (spelled out absolute, since `duckdb:///x` names the absolute path `/x`)."""


def open_sink(url: str) -> Sink:
    """Open (and migrate) the sink a `--sink` URL names."""
    sink: Sink
    if url.startswith("duckdb://"):
        from rlmesh_stream.consumers.sinks.duckdb_sink import DuckDBSink

        path = url[len("duckdb://"):]
        sink = DuckDBSink(path or ":memory:")
    elif url.startswith(("postgresql://", "postgres://")):
        from rlmesh_stream.consumers.sinks.postgres_sink import PostgresSink

        sink = PostgresSink(url)
    else:
        raise ValueError(f"unsupported sink URL {url!r}: use duckdb:///path or postgresql://")
    sink.migrate()
    return sink


__all__ = ["DEFAULT_SINK", "OffsetConflict", "OffsetUpdate", "Sink", "SinkBatch", "open_sink"]

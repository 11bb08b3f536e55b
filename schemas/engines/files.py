"""The files `rlmesh-stream schemas sql` writes, by file name, per engine."""

from __future__ import annotations

from rlmesh_stream.schemas.connection.config import StreamConfig
from rlmesh_stream.schemas.engines import flink, spark


def flink_files(config: StreamConfig, bounded: bool = False) -> dict[str, str]:
    """`<event>.sql` per topic (a CREATE TABLE)."""
    options = flink.FlinkOptions(config.bootstrap, config.registry_url, config.topic_prefix,
                                 bounded=bounded)
    return {f"{et.value}.sql": ddl for et, ddl in flink.create_tables(options).items()}


def spark_files(config: StreamConfig) -> dict[str, str]:
    """`<topic>.avsc` (the reader schema) per topic, and `read_topics.py`."""
    readers = spark.reader_schemas(config.topic_prefix)
    out = {f"{topic}.avsc": text for topic, text in readers.items()}
    out["read_topics.py"] = spark.read_snippet(config.bootstrap, config.registry_url,
                                               config.topic_prefix)
    return out

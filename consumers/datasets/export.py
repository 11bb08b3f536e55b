"""`export trajectories` on the consumers' runtime: a run composed (`make_export`,
`run_export`) and the checks before it (co-partitioned topics, the dataset id, the
default group). The dataset as a sink, and its builders, are `sink.py`'s; a table written
by several members is `iceberg_sink.py`'s.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import replace
from typing import Any

from confluent_kafka import KafkaException

from rlmesh_stream.consumers.builders.base import Builder
from rlmesh_stream.consumers.datasets.manifest import DatasetError
from rlmesh_stream.consumers.datasets.sink import (
    TRAJECTORY_EVENTS,
    CertificateBuilder,
    DatasetSink,
    ExportOptions,
    TrajectoryBuilder,
    check_dataset_id,
)
from rlmesh_stream.consumers.progress import Progress
from rlmesh_stream.consumers.runtime import ConsumerRuntime, RuntimeOptions
from rlmesh_stream.consumers.runtime.until_end import kafka_unreachable
from rlmesh_stream.schemas.connection.client_errors import LIBRDKAFKA_LOG
from rlmesh_stream.schemas.connection.config import StreamConfig
from rlmesh_stream.schemas.contract.topics import EventType


def make_export(config: StreamConfig, options: ExportOptions, runtime_options: RuntimeOptions,
                *, progress: Progress | None = None) -> tuple[DatasetSink, ConsumerRuntime]:
    """The dataset sink and the consumer runtime feeding it (not started: `runtime.run()`).

    A member owns whole sessions (a range assignment over co-partitioned topics); the
    single-writer formats (a Parquet directory, a Minari dataset) take one member only."""
    sink: DatasetSink
    if options.iceberg is not None:  # several members: shards of a table
        from rlmesh_stream.consumers.datasets.iceberg_sink import ShardedSink

        away = check_co_partitioned(config, list(EventType), runtime_options)
        runtime_options = replace(runtime_options, whole_sessions=True, single_member=False)
        sink = ShardedSink(options, config.topic_prefix)
    else:
        away = check_co_partitioned(config, sorted(TRAJECTORY_EVENTS, key=lambda e: e.value),
                                    runtime_options)
        runtime_options = replace(runtime_options, whole_sessions=True, single_member=True)
        sink = DatasetSink(options, config.topic_prefix)
    if away is not None and runtime_options.until_end:
        # an offline run stops now, with the error the runtime would give after waiting
        # for Kafka once more (an unreachable Kafka took 30 s instead of 15); the sink
        # was opened first so that a destination it refuses is still named first
        sink.close()
        raise kafka_unreachable(config.bootstrap, config.connect_timeout, away)
    builders: list[Builder] = [TrajectoryBuilder(sink), CertificateBuilder(sink)]
    if progress is not None:  # episodes exported and skipped, not the records read
        progress.count_with(sink.progress_text)
    return sink, ConsumerRuntime(config, builders, sink, runtime_options,
                                 progress=progress)


def run_export(config: StreamConfig, options: ExportOptions, runtime_options: RuntimeOptions,
               *, progress: Progress | None = None) -> tuple[DatasetSink, ConsumerRuntime]:
    """Export until stopped (or, with `until_end`, until the end seen at start)."""
    sink, runtime = make_export(config, options, runtime_options, progress=progress)
    try:
        runtime.run()
        if runtime.reached_end or options.iceberg is not None:
            # the decisions on what is still open, at the end only: a run stopped before
            # it (SIGTERM, Ctrl-C) has not read the rest of those episodes (iceberg: the
            # summary only, its decisions are `at_end`'s)
            sink.finish()
            if progress is not None:  # the last line again, those decisions counted
                progress.close()
    finally:
        sink.close()
    return sink, runtime


def check_co_partitioned(config: StreamConfig, events: list[EventType],
                         runtime_options: RuntimeOptions) -> KafkaException | None:
    """The topics of `events` that exist have one partition count, or a DatasetError:
    a session's events are in partition i of each (keyed by session id), and a member
    owns a session only if it owns partition i of every one of them.

    Kafka not answering within `config.connect_timeout`: the client's error is
    returned (None otherwise) and the caller decides (`make_export`)."""
    from confluent_kafka.admin import AdminClient

    # librdkafka's lines stay off the terminal (an unreachable Kafka repeats them; the
    # runtime's own check then says so in one line)
    conf: dict[str, Any] = {**config.kafka_config(), "logger": LIBRDKAFKA_LOG}
    admin = AdminClient(conf)
    timeout = config.connect_timeout
    counts: dict[str, int] = {}
    kind = "trajectory" if len(events) == len(TRAJECTORY_EVENTS) else "event"
    for et in events:
        topic = et.topic(config.topic_prefix)
        try:
            meta = admin.list_topics(topic=topic, timeout=timeout).topics.get(topic)
        except KafkaException as exc:  # Kafka away
            return exc
        if meta is not None and meta.error is None and meta.partitions:
            counts[topic] = len(meta.partitions)
    if len(set(counts.values())) <= 1:
        return None
    common = Counter(counts.values()).most_common(1)[0][0]
    odd = ", ".join(f"{t} has {n}" for t, n in sorted(counts.items()) if n != common)
    others = sum(n == common for n in counts.values())
    raise DatasetError(f"the {kind} topics must have the same number of partitions (a "
                       f"session's events are in partition i of each): {odd}, the other "
                       f"{others} have {common}; recreate them with one count")


def default_group(dataset_id: str, out: str) -> str:
    """The group of an export that names none: one per dataset and destination, so two
    exports of one dataset into different places never split its partitions."""
    digest = hashlib.sha256(out.encode()).hexdigest()[:12]
    return f"rlmesh-stream.export.{dataset_id}.{digest}"


__all__ = ["TRAJECTORY_EVENTS", "DatasetError", "DatasetSink", "ExportOptions", "check_dataset_id",
           "make_export", "run_export"]

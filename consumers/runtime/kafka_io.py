"""The runtime's calls to Kafka that hold no state of the run: the consumer's settings,
its client errors, topic metadata asked for by name, a partition's watermarks, the end
offsets at start, and a record's headers. Kept apart so the parts that decide (offsets,
checkpoints, the stop rule) read as decisions."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from rlmesh_stream.consumers.runtime.options import RuntimeOptions
from rlmesh_stream.consumers.runtime.records import TP
from rlmesh_stream.schemas.connection.access import (
    AccessDeniedError,
    RateLimitedLog,
    kafka_access_message,
)
from rlmesh_stream.schemas.connection.client_errors import LIBRDKAFKA_LOG
from rlmesh_stream.schemas.connection.config import StreamConfig

log = logging.getLogger(__name__)

SESSION_TIMEOUT_MS = 10_000


def kafka_config(config: StreamConfig, options: RuntimeOptions,
                 error_cb: Any) -> dict[str, Any]:
    """The consumer's settings: offsets are the sink's (never auto-committed), reads are
    read-committed, and the fetch sizes keep a backlog's partitions in step."""
    conf = {
        **config.kafka_config(),
        "group.id": options.group_id,
        # range (eager): partition i of every topic goes to one member (the topics have
        # one partition count), so a member owns whole sessions (keyed by session id,
        # co-partitioned) and a share of every topic. cooperative-sticky balances the
        # count of partitions over all topics: with 2 members reading the episode topics
        # (4 x 12 partitions) the newcomer was given session_ended and session_failed
        # whole, 2% of the records, and the other member read 98% alone
        "partition.assignment.strategy": "range",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest" if options.from_beginning else "latest",
        "isolation.level": "read_committed",
        # an end of partition is reported in line with the records (after every one
        # before it): where a partition ends past its last record (a transaction's
        # commit marker, an aborted transaction's records: never handed over), the
        # only word that reading has reached that end (`Offsets.reached_end`). librdkafka
        # reports an end once per offset, again after a seek or an assignment (each
        # starts a new fetch version: its source, rdkafka_fetcher.c), which a rewind
        # relies on: it forgets the ends noted before it
        "enable.partition.eof": True,
        "fetch.wait.max.ms": 100,
        # 64 KiB per partition and fetch (librdkafka: 1 MiB) keeps the partitions of a
        # backlog in step, so an aligned cut (`policy.py`) leaves little behind: 60 400 rows
        # for `consume episodes` over 120k events, 64 000 to 98 000 at 1 MiB, at the
        # same speed (8 KiB to 1 MiB all read equally fast); a bigger record is still
        # fetched whole
        "max.partition.fetch.bytes": 65_536,
        # once the prefetched records reach queued.min.messages (100 000: the whole
        # consumer queue, not a partition's), librdkafka stops fetching for this long
        # (default 1 s); a backlog's reader drains 100 000 records in about a second, so
        # it found its queue empty for up to that long: 615 000 records took a bare loop
        # 2.7 to 3.7 s with the default, 0.8 to 0.9 s with 10 ms
        "fetch.queue.backoff.ms": 10,
        "session.timeout.ms": SESSION_TIMEOUT_MS,
        # a topic created after the subscription (producers started after the
        # consumers) is joined within 10 s, not librdkafka's 5 minutes
        "topic.metadata.refresh.interval.ms": 10_000,
        "heartbeat.interval.ms": 1_000,
        # connect to the brokers as the consumer is made (`Connection`), not at the first
        # request: librdkafka's sparse connections connect on demand, and after the
        # bootstrap broker's first answer wait up to reconnect.backoff.ms / 2 (50 ms) before
        # connecting to the broker it named, which the --until-end topic check paid
        # (54 ms against 6 to 10 eager, measured by a bare client alone). The cost: one
        # connection to every broker, most of which a group member fetches from anyway
        # (its partitions' leaders are spread over them)
        "enable.sparse.connections": False,
        "error_cb": error_cb,
        # librdkafka's lines stay off the terminal (a broker that is down repeats them
        # every few ms); its errors reach `error_cb`, logged once per kind and 30 s
        "logger": LIBRDKAFKA_LOG,
    }
    if options.instance_id:
        conf["group.instance.id"] = options.instance_id
    conf.update(options.kafka_overrides)
    return conf


class Connection:
    """A group member's Kafka consumer, made before the process opens its sink.

    librdkafka reaches the brokers on threads of its own (connect, API versions,
    metadata; eagerly: `enable.sparse.connections` off) while Python opens the sink
    (~90 ms: DuckDB's import and connect), so the topic checks that follow find a
    connection ready. It
    subscribes to nothing: a sink that cannot be used stops the run before it joins the
    group (`close`), and never rebalances the other members."""

    def __init__(self, config: StreamConfig, options: RuntimeOptions) -> None:
        self.errors = ConsumerErrors(config, options.group_id)
        self.consumer = Consumer(kafka_config(config, options, self.errors))

    def close(self) -> None:
        """Give up the connection unused (nothing was subscribed)."""
        self.consumer.close()


class ConsumerErrors:
    """The consumer's `error_cb`: wrong credentials stop the process (raised out of
    consume); other errors are logged once per kind and 30 s, and the last one is kept
    to explain a failure."""

    def __init__(self, config: StreamConfig, group_id: str) -> None:
        self.config, self.group_id = config, group_id
        self.last = ""  # the last client-level error, to explain a failure
        self.quiet = False  # reported once, in the error of a failed check
        self._log = RateLimitedLog()

    def __call__(self, err: KafkaError) -> None:
        denied = kafka_access_message(self.config, err, operation="read",
                                      group=self.group_id)
        if denied is not None:
            raise AccessDeniedError(denied)
        if err.fatal():
            raise KafkaException(err)
        if err.code() != KafkaError._ALL_BROKERS_DOWN or not self.last:
            self.last = err.str()  # the transport error says more than "all down"
        if self.quiet:
            return
        # a broker that is down repeats its error every few ms: once per code and 30 s
        self._log.warning(log, f"consumer error: {err.str()} [{err.name()}]",
                          key=err.name())

    def record_error(self, message: Message) -> None:
        """An error delivered in place of a record: end of partition is no error; access
        denied and fatal ones stop the run; the rest is logged."""
        error = message.error()
        assert error is not None
        if error.code() == KafkaError._PARTITION_EOF:
            return
        denied = kafka_access_message(self.config, error, operation="read",
                                      topic=message.topic(), group=self.group_id)
        if denied is not None:  # retrying cannot help: say who lacks what
            raise AccessDeniedError(denied)
        if error.fatal():
            raise KafkaException(error)
        log.warning("consumer error: %s", error)


_RETRIABLE_METADATA = {
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError._UNKNOWN_PARTITION,  # the client's own metadata lags during a broker stall
    KafkaError._TIMED_OUT,
    KafkaError._TRANSPORT,
}


def existing_topics(consumer: Consumer, topics: list[str], timeout: float) -> dict[str, Any]:
    """The metadata of those of `topics` that exist, asked for topic by topic (a consumer
    never creates a topic by asking): the whole cluster's metadata, every topic of every
    team, took 130 to 200 ms to fetch and parse with 10 000 topics."""
    found: dict[str, Any] = {}
    for topic in topics:
        meta = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
        # absent from the whole listing: unknown, or not ours to see (as the listing does)
        if meta is not None and (meta.error is None or meta.error.code() not in (
                KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.TOPIC_AUTHORIZATION_FAILED)):
            found[topic] = meta
    return found


def watermarks(
    consumer: Consumer, tp: TopicPartition, deadline_s: float = 60.0
) -> tuple[int, int]:
    """A partition's (low, high) offsets, retried while leadership settles.

    Right after a topic is created, or while a leader moves, the broker answers
    NOT_LEADER / LEADER_NOT_AVAILABLE for a moment; during a broker stall (or right after
    partitions are added) the client's own metadata may not know the partition
    (_UNKNOWN_PARTITION) until it is refreshed. That is a wait, not a failure.
    """
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            low, high = consumer.get_watermark_offsets(tp, timeout=10)
            return int(low), int(high)
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            code = err.code() if isinstance(err, KafkaError) else None
            if code not in _RETRIABLE_METADATA or time.monotonic() > deadline:
                raise
            log.info("waiting for %s[%d]'s leader: %s", tp.topic, tp.partition, err)
            time.sleep(0.5)
            if code == KafkaError._UNKNOWN_PARTITION:  # the client's metadata is behind
                with contextlib.suppress(KafkaException):
                    consumer.list_topics(tp.topic, timeout=5)  # refreshes it


def high_watermarks(consumer: Consumer, topics: list[str], timeout: float) -> dict[TP, int]:
    """Every partition of `topics` and its high watermark now (what the consumer can read
    up to). The admin client's list_offsets answered lower ends than this for records
    already acknowledged, right after they were published: an --until-end run then
    decided on episodes it had not read whole."""
    ends: dict[TP, int] = {}
    for topic, meta in existing_topics(consumer, topics, timeout).items():
        for p in meta.partitions:
            ends[(topic, p)] = watermarks(consumer, TopicPartition(topic, p))[1]
    return ends


def end_offsets(consumer: Consumer, admin: Callable[[], Any], topics: list[str]
                ) -> dict[TP, int]:
    """Each existing partition of `topics` and its end offset as a read-committed
    consumer sees it (one request per broker, through `admin()`, an AdminClient made
    only when a partition exists); raises what Kafka raises."""
    from confluent_kafka import IsolationLevel
    from confluent_kafka.admin import OffsetSpec

    partitions = [TopicPartition(t, p) for t, meta in
                  existing_topics(consumer, topics, 5.0).items() for p in meta.partitions]
    if not partitions:
        return {}
    ends = admin().list_offsets(
        {tp: OffsetSpec.latest() for tp in partitions}, request_timeout=5.0,
        isolation_level=IsolationLevel.READ_COMMITTED)
    return {(tp.topic, tp.partition): f.result().offset for tp, f in ends.items()}


def member_partitions(admin: Any, group: str, member_id: str,
                      timeout: float = 10.0) -> set[TP] | None:
    """The partitions the coordinator of `group` gives member `member_id` now (empty: no
    such member, e.g. its session timed out), or None when the group cannot be described."""
    try:
        future = admin.describe_consumer_groups([group], request_timeout=timeout)[group]
        members = future.result(timeout=timeout + 5).members
    except Exception as exc:  # the coordinator away: unknown
        log.debug("cannot describe group %s (%s)", group, exc)
        return None
    for member in members:
        if member.member_id == member_id:
            tps = member.assignment.topic_partitions if member.assignment else []
            return {(tp.topic, tp.partition) for tp in tps}
    return set()


def commit(consumer: Consumer, offsets: list[TopicPartition], wait: bool = False) -> None:
    """Mirror offsets into the group, for lag tools only (the sink has the real ones)."""
    if not offsets:
        return
    try:
        if wait:
            consumer.commit(offsets=offsets, asynchronous=False)
        else:
            consumer.commit(offsets=offsets, asynchronous=True)
    except KafkaException as exc:
        log.debug("kafka commit failed (harmless, the sink has the offsets): %s", exc)


def header_dict(message: Message) -> dict[str, bytes]:
    """A message's headers by name (None values left out; str values as bytes)."""
    raw = message.headers()
    if not raw:
        return {}
    headers: dict[str, Any] = dict(raw)  # bytes or None values; a later name wins
    if None in headers.values() or len(headers) != len(raw):
        # a None value, or a repeated name: the last non-None value of each name
        pairs = raw.items() if isinstance(raw, dict) else raw
        headers = {k: v for k, v in pairs if v is not None}
    if str in map(type, headers.values()):
        return {k: v.encode() if isinstance(v, str) else v for k, v in headers.items()}
    return headers


def header_pairs(message: Message) -> list[tuple[str, bytes | None]]:
    """A message's headers as (name, bytes) pairs (the producer writes bytes)."""
    raw = message.headers() or []
    pairs = list(raw.items()) if isinstance(raw, dict) else raw
    out: list[tuple[str, bytes | None]] = []
    for name, value in pairs:
        out.append((name, value.encode() if isinstance(value, str) else value))
    return out

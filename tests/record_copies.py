"""A published fleet copied record for record into another topic prefix, as another
producer would write it: some records re-keyed or moved, every one written in
transactions (a Kafka Streams or Flink job writing exactly once), or some re-delivered
(the hook's spool replayed, an acknowledgement lost: the same record again, headers and
all). Copies keep their records' timestamps."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from rlmesh_stream.schemas.connection.config import StreamConfig
from rlmesh_stream.schemas.contract.headers import delivery_stamp
from rlmesh_stream.schemas.contract.topics import EventType

# (topic, key, partition) of a record -> the key and partition its copy is written with
Change = Callable[[str, bytes, int], tuple[bytes, int]]
Revalue = Callable[[str, bytes], bytes]  # (the original's topic, value) -> the copy's value


def new_prefix(stack: Any) -> StreamConfig:
    """The test stack under a topic prefix of its own (an original, or a copy)."""
    return StreamConfig.from_env(env={}, bootstrap=stack.bootstrap,
                                 registry_url=stack.registry_url,
                                 topic_prefix=f"c{uuid.uuid4().hex[:10]}.rlmesh.runtime")


def read_records(config: StreamConfig, topics: list[str]) -> list[Any]:
    """Every record of `topics` (one consumer assigned all their partitions at once)."""
    consumer = Consumer({"bootstrap.servers": config.bootstrap,
                         "group.id": f"read-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    try:
        assignment, left = [], 0
        for topic in topics:
            for partition in consumer.list_topics(topic, timeout=30).topics[topic].partitions:
                low, high = consumer.get_watermark_offsets(
                    TopicPartition(topic, partition), timeout=30)
                assignment.append(TopicPartition(topic, partition, low))
                left += high - low
        consumer.assign(assignment)
        records: list[Any] = []
        while left > 0:
            # consume() waits until it has as many as it asks for, or the timeout
            batch = [m for m in consumer.consume(min(left, 1000), 10) if m.error() is None]
            assert batch, f"{left} records of {topics} not read"
            records += batch
            left -= len(batch)
        return records
    finally:
        consumer.close()


def copy_records(original: StreamConfig, copy: StreamConfig, *,
                 change: Change | None = None, revalue: Revalue | None = None,
                 transactions: int = 0,
                 repeat_every: int = 0, repeat_later: int = 0,
                 part: slice | None = None) -> list[Any]:
    """Write every event record of `original` into `copy`'s topics, in order per partition:
    key and partition as `change` says (unchanged without it), the value as `revalue`
    says (given the original's topic); with `transactions`, in
    that many committed transactions, each followed by an aborted one holding copies of
    its first records (which no read-committed consumer sees); with `repeat_every` n,
    the records are written in the order their producer published them (by sequence
    number; in order per partition still) and every n-th is written twice, the second time
    after the `repeat_later` records next (a replay: same key, value and `rlmesh.ps`
    header); `part`: only that slice of what would be written (a copy written in several
    goes). Returns the records read."""
    prefix = original.topic_prefix
    records = read_records(original, [et.topic(prefix) for et in EventType])
    written = records
    if repeat_every:  # in the order the producer published them: by sequence number
        written = redelivered(sorted(records, key=_sequence), repeat_every, repeat_later)
    if part is not None:
        written = written[part]
    conf: dict[str, Any] = {"bootstrap.servers": copy.bootstrap}
    if transactions:
        conf["transactional.id"] = f"tx-{uuid.uuid4().hex}"
    producer = Producer(conf)

    def write(chunk: list[Any]) -> None:
        for m in chunk:
            key, partition = m.key(), m.partition()
            if change is not None:
                key, partition = change(m.topic(), key, partition)
            value = m.value() if revalue is None else revalue(m.topic(), m.value())
            producer.produce(copy.topic_prefix + m.topic().removeprefix(prefix), value,
                             key, partition, headers=m.headers(), timestamp=m.timestamp()[1])

    if not transactions:
        write(written)
        assert producer.flush(60) == 0
        return records
    producer.init_transactions(30)
    size = -(-len(written) // transactions)
    for start in range(0, len(written), size):
        chunk = written[start:start + size]
        producer.begin_transaction()
        write(chunk)
        producer.commit_transaction(30)
        producer.begin_transaction()
        write(chunk[:10])
        assert producer.flush(60) == 0  # in the log, then aborted (an abort drops what is unsent)
        producer.abort_transaction(30)
    return records


def redelivered(records: list[Any], every: int, later: int) -> list[Any]:
    """`records` with every `every`-th one again, `later` records after it (the records it
    returns are the ones to write; `copy_records` returns those read)."""
    out: list[Any] = []
    waiting: list[tuple[int, Any]] = []  # (the index after which it is written again, record)
    for i, m in enumerate(records):
        out.append(m)
        if (i + 1) % every == 0:
            waiting.append((i + later, m))
        while waiting and waiting[0][0] <= i:
            out.append(waiting.pop(0)[1])
    out += [m for _, m in waiting]
    return out


def _sequence(record: Any) -> int:
    stamp = delivery_stamp(dict(record.headers() or []))
    assert stamp is not None, "a record without delivery headers"
    return int(stamp[2])

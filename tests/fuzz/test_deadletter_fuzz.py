"""A topic full of malformed records: the consumer runtime applies or dead-letters every one.

The decoder property (test_decoder_fuzz) says no input crashes `decode`; this
says the same of the whole consumer path on a real topic: a fixed, seeded
corpus of malformed values (random bytes, truncations, byte flips, huge
lengths, unknown schema ids, events of another type) interleaved with valid
ones is read to the end, nothing is left behind, and each record is either
applied to the tables or in the dead-letter table and topic.
"""

from __future__ import annotations

import random
import struct
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer

from rlmesh_stream.consumers.builders import make_builders
from rlmesh_stream.consumers.runtime import ConsumerRuntime, RuntimeOptions
from rlmesh_stream.consumers.sinks import open_sink
from rlmesh_stream.infra.topics import ensure_topics
from rlmesh_stream.schemas.connection.config import StreamConfig
from rlmesh_stream.schemas.contract import headers as h
from rlmesh_stream.schemas.contract.topics import EventType
from tests.contract_samples.hostile import varint
from tests.fuzz.fuzz_seeds import Seeds

pytestmark = pytest.mark.timeout(300)

CORPUS = 300  # malformed records; each costs microseconds, plus one registry 404 per unknown id
VALID = 30
TOPIC_TYPE = EventType.SESSION_STARTED


def malformed_corpus(seeds: Seeds, rng: random.Random, count: int) -> list[bytes]:
    """Deterministic malformed values built from real framed records."""
    values = [v for _, v in seeds.items]
    unknown = max(seeds.known_ids) + 50_000
    out: list[bytes] = []
    for i in range(count):
        seed = rng.choice(values)
        kind = i % 6
        if kind == 0:
            out.append(rng.randbytes(rng.randrange(0, 300)))
        elif kind == 1:
            out.append(seed[:rng.randrange(0, len(seed))])
        elif kind == 2:
            flipped = bytearray(seed)
            for _ in range(rng.randrange(1, 6)):
                flipped[rng.randrange(5, len(flipped))] = rng.randrange(256)
            out.append(bytes(flipped))
        elif kind == 3:
            at = rng.randrange(6, len(seed))
            out.append(seed[:at] + varint(rng.randrange(2**20, 2**62)) + seed[at:])
        elif kind == 4:
            out.append(struct.pack(">bI", 0, unknown + rng.randrange(20)) + seed[5:])
        else:  # a valid event of another type (or format) on this topic
            out.append(seed)
    return out


def _count(config: StreamConfig, topic: str, expected: int, timeout: float = 60.0) -> int:
    consumer = Consumer({**config.kafka_config(), "group.id": uuid.uuid4().hex,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    seen = 0
    deadline = time.monotonic() + timeout
    try:
        while seen < expected and time.monotonic() < deadline:
            seen += sum(1 for m in consumer.consume(500, 0.5) if m.error() is None)
        seen += sum(1 for m in consumer.consume(500, 1.0) if m.error() is None)
    finally:
        consumer.close()
    return seen


def test_every_malformed_record_is_applied_or_dead_lettered(
    seeds: Seeds, stream_config: StreamConfig, tmp_path: Path,
) -> None:
    topic = TOPIC_TYPE.topic(stream_config.topic_prefix)
    ensure_topics(stream_config, partitions=1, replication_factor=1, topics=[topic])
    rng = random.Random(20261203)
    valid = [v for (_, et), v in seeds.items if et is TOPIC_TYPE]
    corpus = malformed_corpus(seeds, rng, CORPUS) + [rng.choice(valid) for _ in range(VALID)]
    rng.shuffle(corpus)
    producer = Producer({**stream_config.kafka_config(), "linger.ms": 5})
    for seq, value in enumerate(corpus):
        producer.produce(topic, key=b"fuzz", value=value, headers=[
            (h.EVENT_TYPE, TOPIC_TYPE.value.encode()), (h.PRODUCER_ID, b"fuzzer"),
            (h.SEQUENCE, str(seq).encode())])
    assert producer.flush(30) == 0

    applied: list[int] = []
    sink = open_sink(f"duckdb://{tmp_path / 'fuzz.duckdb'}")
    runtime = ConsumerRuntime(
        stream_config, make_builders(["sessions"]), sink,
        RuntimeOptions(group_id=f"rlmesh-stream.fuzz-{uuid.uuid4().hex[:6]}",
                       from_beginning=True, until_end=True),
        on_checkpoint=lambda info: applied.append(info.records))
    started = time.monotonic()
    try:
        runtime.run()
        dead_rows = sink.query("SELECT count(*) FROM dead_letters")[0][0]
    finally:
        sink.close()

    assert time.monotonic() - started < 120, "the consumer did not finish the corpus in time"
    assert runtime.events == len(corpus)
    assert sum(applied) + runtime.dead_letters == len(corpus)
    assert runtime.dead_letters >= CORPUS // 2  # most of the corpus cannot be read
    assert dead_rows == runtime.dead_letters
    assert _count(stream_config, f"{stream_config.topic_prefix}.dlq",
                  runtime.dead_letters) == runtime.dead_letters

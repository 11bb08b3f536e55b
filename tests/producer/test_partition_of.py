"""`schemas.contract.partitioning.partition_of` is where the producer's partitioner puts a
key: records produced with the producer's own librdkafka settings (`murmur2_random`) land
on the partitions it computes, for keys of every length modulo 4 and session ids, on topics
of several partition counts."""

from __future__ import annotations

import uuid

from confluent_kafka import KafkaError, Message, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from rlmesh_stream.producer.config import ProducerSettings
from rlmesh_stream.schemas.connection.config import StreamConfig
from rlmesh_stream.schemas.contract.partitioning import murmur2, partition_of


def test_murmur2_gives_javas_values() -> None:
    # the values of Kafka's own test of Utils.murmur2 (Java's signed ints)
    for key, java in (("21", -973932308), ("foobar", -790332482),
                      ("a-little-bit-long-string", -985981536),
                      ("a-little-bit-longer-string", -1486304829),
                      ("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
                      ("abc", 479470107)):
        assert murmur2(key.encode()) == java & 0xFFFFFFFF


def test_records_land_on_the_partition_partition_of_computes(
        stream_config: StreamConfig) -> None:
    keys = [uuid.uuid4().hex[:n].encode() for n in range(1, 13)]
    keys += [str(uuid.uuid4()).encode() for _ in range(300)]
    keys.append("séance-ü".encode())
    counts = (1, 7, 12, 64)
    topics = {n: f"{stream_config.topic_prefix}.partitioning-{n}" for n in counts}
    admin = AdminClient(stream_config.kafka_config())
    for future in admin.create_topics([NewTopic(t, num_partitions=n, replication_factor=1)
                                       for n, t in topics.items()]).values():
        future.result(30)
    producer = Producer(ProducerSettings(stream=stream_config).kafka_config())
    assert ProducerSettings(stream=stream_config).kafka_config()["partitioner"] == \
        "murmur2_random"
    landed: dict[tuple[str, bytes], int] = {}
    failed: list[KafkaError] = []

    def report(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            failed.append(err)
        else:
            landed[(msg.topic(), msg.key())] = msg.partition()

    for topic in topics.values():
        for key in keys:
            producer.produce(topic, b"x", key, on_delivery=report)
    assert producer.flush(60) == 0
    assert not failed
    assert len(landed) == len(keys) * len(counts)
    wrong = [(n, key, landed[(t, key)], partition_of(key, n)) for n, t in topics.items()
             for key in keys if landed[(t, key)] != partition_of(key, n)]
    assert wrong == []

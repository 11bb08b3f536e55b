"""Where a key lands: the producer's partitioner, computed without a Kafka client.

The producer publishes with librdkafka's `murmur2_random` (`producer/config.py`), the
partitioner of Java's Kafka clients: the 32-bit murmur2 of the key's bytes (seed
0x9747b28c), its sign bit cleared, modulo the topic's partition count. With the key a
session's id (`topics.record_key`), `partition_of(key, n)` is the partition number every
event of that session has on a topic of `n` partitions, which a consumer can compute for
a session without having read its records.
"""

from __future__ import annotations

import struct
from functools import lru_cache

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 of `data` as an unsigned 32-bit number (Java's `Utils.murmur2`,
    librdkafka's `rd_murmur2`, whose signed int this is read as unsigned)."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    whole = length & ~3
    for (k,) in struct.iter_unpack("<I", data[:whole]):
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    tail = length & 3
    if tail:
        if tail == 3:
            h ^= data[whole + 2] << 16
        if tail >= 2:
            h ^= data[whole + 1] << 8
        h ^= data[whole]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h


def partition_of(key: bytes, partitions: int) -> int:
    """The partition `murmur2_random` gives a key (not a null one) on a topic of `partitions`."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


@lru_cache(maxsize=65_536)
def session_partition(session_id: str, partitions: int) -> int:
    """The partition of a session's events (keyed by its id, `topics.record_key`) on a
    topic of `partitions`; remembered for the sessions of the last batches."""
    return partition_of(session_id.encode("utf-8"), partitions)

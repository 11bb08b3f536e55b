"""Kafka record headers every producer writes and every consumer may read.

They let a consumer detect gaps and duplicates end to end (producer id +
per-producer sequence), and know what it reads before decoding it.
"""

from __future__ import annotations

import re

CONTRACT_VERSION = "1"

EVENT_TYPE = "rlmesh.event_type"  # EventType value, e.g. b"step_completed"
CONTRACT = "rlmesh.contract_version"  # CONTRACT_VERSION
PRODUCER_ID = "rlmesh.producer_id"  # unique per producer process (UUID4 hex)
SEQUENCE = "rlmesh.seq"  # per-producer sequence number, ASCII decimal, from 0
# The largest sequence number: consumers store sequences as BIGINT and count a producer's
# sequences as max + 1, which must fit a BIGINT too.
MAX_SEQUENCE = 2**63 - 2
# Set when a payload above the producer's size cap was published without its
# leaves: ASCII decimal byte size of the leaves that were left out.
LEAVES_OMITTED_BYTES = "rlmesh.leaves_omitted_bytes"

# Dead-letter headers (consumers): why and where a record could not be decoded.
DLQ_ERROR = "rlmesh.dlq.error"
DLQ_TOPIC = "rlmesh.dlq.topic"
DLQ_PARTITION = "rlmesh.dlq.partition"
DLQ_OFFSET = "rlmesh.dlq.offset"


_DECIMAL = re.compile(rb"-?[0-9]+")


def parse_sequence(raw: bytes) -> int:
    """A `rlmesh.seq` header's number; ValueError saying why when it is not a valid one."""
    if not _DECIMAL.fullmatch(raw):
        raise ValueError("not an ASCII decimal number")
    number = int(raw)
    if number < 0:
        raise ValueError("negative")
    if number > MAX_SEQUENCE:
        raise ValueError(f"above the largest sequence number {MAX_SEQUENCE}")
    return number

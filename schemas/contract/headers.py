"""Kafka record headers every producer writes and every consumer may read.

They let a consumer detect gaps and duplicates end to end (producer id +
per-producer sequence). Two versions of the contract's headers exist, and
consumers read both:

* version 2 (what our producers write): one header, `rlmesh.ps`, whose
  value packs the producer id and the sequence number,
  `b"<producer id>:<seq>"`. The event type is the topic's, the contract
  version is the header's name: one header per record instead of four,
  which is most of what a record costs the producer besides encoding it;
* version 1: four headers, `rlmesh.event_type`, `rlmesh.contract_version`,
  `rlmesh.producer_id` and `rlmesh.seq` (still read: spools and topics keep
  older records).

`delivery_stamp` is the one reader of either version.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

CONTRACT_VERSION = "2"

# Version 2: producer id and sequence in one header, b"<producer id>:<seq>".
PRODUCER_SEQUENCE = "rlmesh.ps"
SEPARATOR = b":"

# Version 1 (read, no longer written).
EVENT_TYPE = "rlmesh.event_type"  # EventType value, e.g. b"step_completed"
CONTRACT = "rlmesh.contract_version"  # b"1"
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


def stamp_prefix(producer_id: str) -> bytes:
    """What every `rlmesh.ps` value of this producer starts with; the sequence follows."""
    if SEPARATOR.decode() in producer_id:
        raise ValueError(f"a producer id cannot contain {SEPARATOR.decode()!r}")
    return producer_id.encode("utf-8") + SEPARATOR


def delivery_stamp(headers: Mapping[str, bytes]) -> tuple[str, bytes, bytes] | None:
    """(header name, producer id, raw sequence) of a record's headers, either version.

    None when the record carries no delivery headers. The sequence is as
    read: `parse_sequence` says whether it is a valid one; the header name
    is the one to name when it is not.
    """
    packed = headers.get(PRODUCER_SEQUENCE)
    if packed is not None:
        producer, sep, seq = packed.rpartition(SEPARATOR)
        if not sep:  # no producer id: the whole value is reported as the sequence
            return PRODUCER_SEQUENCE, b"", packed
        return PRODUCER_SEQUENCE, producer, seq
    producer_id = headers.get(PRODUCER_ID)
    sequence = headers.get(SEQUENCE)
    if producer_id is None or sequence is None:
        return None
    return SEQUENCE, producer_id, sequence


def parse_sequence(raw: bytes) -> int:
    """A sequence number as read from a header; ValueError saying why when it is not valid."""
    if not _DECIMAL.fullmatch(raw):
        raise ValueError("not an ASCII decimal number")
    number = int(raw)
    if number < 0:
        raise ValueError("negative")
    if number > MAX_SEQUENCE:
        raise ValueError(f"above the largest sequence number {MAX_SEQUENCE}")
    return number

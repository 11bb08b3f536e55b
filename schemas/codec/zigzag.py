"""Avro's `long`: a zigzag varint, written and read (the one copy of both).

Every codec of ours writes or reads it: the Avro writer and readers (the generated ones
inline the one- and two-byte cases and call `read_long` for the rest), the wire format's
protobuf message indexes, and the check of foreign payloads (`avro_guard`).
"""

from __future__ import annotations

from rlmesh_stream.schemas.errors import RlmeshStreamError

I64_MIN, I64_MAX = -(2**63), 2**63 - 1
SMALL = 4096  # longs whose encoding `ZZ` holds from the start (every short length prefix)


class Malformed(RlmeshStreamError, ValueError):
    """The payload is not valid Avro for the schema."""


def encode_long(value: int) -> bytes:
    """Zigzag varint of a long (Avro `long`); raises OverflowError outside i64."""
    if not I64_MIN <= value <= I64_MAX:
        raise OverflowError(f"{value} does not fit an Avro long")
    n = (value << 1) ^ (value >> 63)
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


class _LongTable(dict[int, bytes]):
    """Avro encoding of a long by one dict lookup: a long of 0..SMALL-1 is encoded when
    first asked for and kept, any other computed (and range-checked) each time. Filled
    on demand, not at import: precomputing the 4 096 took 5 ms of every process's start."""

    def __missing__(self, value: int) -> bytes:
        encoded = encode_long(value)
        if 0 <= value < SMALL:
            self[value] = encoded
        return encoded


ZZ = _LongTable()


def long_bytes(value: int) -> bytes:
    return ZZ[value]


ZD = [(x >> 1) ^ -(x & 1) for x in range(128)]
"""Zigzag-decoded value of every one-byte varint."""


def read_long(b: bytes | memoryview, p: int) -> tuple[int, int]:
    """A zigzag varint at p: (value, next position). IndexError: the bytes end first;
    Malformed: more than 64 bits (Avro's long is 64-bit: a tenth byte holds one bit)."""
    n = shift = 0
    while True:
        x = b[p]
        p += 1
        n |= (x & 0x7F) << shift
        if x < 0x80:
            if shift == 63 and x > 1:
                raise Malformed("varint outside the 64-bit range of an Avro long")
            return (n >> 1) ^ -(n & 1), p
        shift += 7
        if shift > 63:
            raise Malformed("varint longer than 10 bytes")

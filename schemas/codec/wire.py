"""The Confluent wire format: magic byte 0, 4-byte big-endian schema id, payload.

Protobuf values carry, between the id and the payload, the message-index path
of the message within its schema file: zigzag varints, a count then the
indexes, with the common path `[0]` shortened to the single byte 0.
"""

from __future__ import annotations

import struct
from typing import Literal

from rlmesh_stream.schemas.codec.zigzag import Malformed, encode_long, read_long
from rlmesh_stream.schemas.contract.errors import BadMagicByteError, CorruptPayloadError

Format = Literal["avro", "protobuf"]
FORMATS: tuple[Format, ...] = ("avro", "protobuf")
MAGIC = 0
_HEADER = struct.Struct(">bI")
_headers: dict[int, bytes] = {}


def message_index_bytes(message_index: tuple[int, ...]) -> bytes:
    """The protobuf message-index header; `(0,)` (the first message) is b'\\x00'."""
    if tuple(message_index) == (0,):
        return b"\x00"
    return encode_long(len(message_index)) + b"".join(map(encode_long, message_index))


def header(schema_id: int) -> bytes:
    """Magic byte and schema id (cached: there are few ids)."""
    h = _headers.get(schema_id)
    if h is None:
        if not 0 <= schema_id < 2**31:
            raise ValueError(f"schema id {schema_id} is not a registry id")
        h = _headers[schema_id] = _HEADER.pack(MAGIC, schema_id)
    return h


def frame(schema_id: int, payload: bytes, format: Format = "avro",
          message_index: tuple[int, ...] = (0,)) -> bytes:
    """A record value in the Confluent wire format."""
    h = _headers.get(schema_id) or header(schema_id)
    if format == "avro":
        return h + payload
    if format == "protobuf":
        return b"".join((h, message_index_bytes(message_index), payload))
    raise ValueError(f"unknown format {format!r}: 'avro' or 'protobuf'")


def schema_id_of(value: bytes) -> int:
    """The schema id in a framed value's header; BadMagicByteError when there is none."""
    if len(value) < 5:
        raise BadMagicByteError(
            f"value of {len(value)} bytes is too short for the 5-byte Confluent header")
    if value[0] != MAGIC:
        raise BadMagicByteError(
            f"first byte is {value[0]:#04x}, not the Confluent magic byte 0x00")
    return int.from_bytes(value[1:5], "big")


def read_message_index(value: bytes | memoryview, offset: int = 5) -> tuple[tuple[int, ...], int]:
    """The protobuf message-index path at `offset` and the payload's offset after it."""

    def varint(pos: int) -> tuple[int, int]:
        try:
            return read_long(value, pos)
        except IndexError:
            raise CorruptPayloadError("protobuf message-index header is truncated") from None
        except Malformed:
            raise CorruptPayloadError("protobuf message-index varint is too long") from None

    count, pos = varint(offset)
    if count == 0:
        return (0,), pos
    if count < 0 or count > 100:
        raise CorruptPayloadError(f"protobuf message-index count {count} is not plausible")
    path = []
    for _ in range(count):
        i, pos = varint(pos)
        path.append(i)
    return tuple(path), pos

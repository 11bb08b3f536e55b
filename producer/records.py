"""The unit the producer moves around: one encoded event bound for one topic.

A record is what the hook keeps of an event once it has accepted it: the
payload (schemaless, or already framed with its schema id), the key and the
headers. It is all a spool needs to publish the event later, possibly from
another process, so it is also what the spool writes to disk.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

from rlmesh_stream.schemas.contract.topics import EVENT_TYPES, EventType

# confluent-kafka takes either; the hook builds a dict (one `rlmesh.ps` entry, not tracked by
# the garbage collector), a spool hands back a list (and may hold version 1 headers).
Headers = dict[str, str | bytes | None] | list[tuple[str, str | bytes | None]]

_EVENT_INDEX: dict[EventType, int] = {et: i for i, et in enumerate(EVENT_TYPES)}


@dataclass(slots=True)
class Record:
    """An accepted event, encoded. `framed` says whether `payload` already carries its schema id.

    A payload is left unframed when the registry could not be asked for the
    schema id at accept time; it is framed when it is finally produced.
    """

    event_type: EventType
    key: bytes
    payload: bytes
    framed: bool
    headers: Headers
    sequence: int


# On disk: crc32(u32) | body length(u32) | body; the CRC covers the body so a
# torn tail left by a crash is recognised and ignored, never half-published.
_FRAME = struct.Struct("<II")
_BODY_HEAD = struct.Struct("<BBqHH")  # event index, framed, sequence, key len, header count
_HEADER_HEAD = struct.Struct("<HI")  # name len, value len


def encode_record(record: Record) -> bytes:
    """The record's on-disk frame."""
    parts = [
        _BODY_HEAD.pack(
            _EVENT_INDEX[record.event_type], record.framed, record.sequence,
            len(record.key), len(record.headers),
        ),
        record.key,
    ]
    items = record.headers.items() if isinstance(record.headers, dict) else record.headers
    for name, header in items:
        value = header if isinstance(header, bytes) else (header or "").encode("utf-8")
        raw_name = name.encode("utf-8")
        parts.append(_HEADER_HEAD.pack(len(raw_name), len(value)))
        parts.append(raw_name)
        parts.append(value)
    parts.append(record.payload)
    body = b"".join(parts)
    return _FRAME.pack(zlib.crc32(body), len(body)) + body


def decode_records(data: bytes) -> tuple[list[Record], int]:
    """Every whole, intact record in `data`, and how many bytes they span.

    Stops at the first frame that is cut short or fails its CRC (a crash
    mid-write): what follows it cannot be trusted.
    """
    records: list[Record] = []
    pos = 0
    end = len(data)
    while pos + _FRAME.size <= end:
        crc, length = _FRAME.unpack_from(data, pos)
        body_start = pos + _FRAME.size
        body_end = body_start + length
        if body_end > end:
            break
        body = data[body_start:body_end]
        if zlib.crc32(body) != crc:
            break
        records.append(_decode_body(body))
        pos = body_end
    return records, pos


def _decode_body(body: bytes) -> Record:
    index, framed, sequence, key_len, n_headers = _BODY_HEAD.unpack_from(body, 0)
    pos = _BODY_HEAD.size
    key = body[pos:pos + key_len]
    pos += key_len
    headers: list[tuple[str, str | bytes | None]] = []
    for _ in range(n_headers):
        name_len, value_len = _HEADER_HEAD.unpack_from(body, pos)
        pos += _HEADER_HEAD.size
        name = body[pos:pos + name_len].decode("utf-8")
        pos += name_len
        headers.append((name, body[pos:pos + value_len]))
        pos += value_len
    return Record(
        event_type=EVENT_TYPES[index], key=key, payload=body[pos:], framed=bool(framed),
        headers=headers, sequence=sequence,
    )

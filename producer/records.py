"""The unit the producer moves around: one encoded event bound for one topic.

A record is what the hook keeps of an event once it has accepted it: the
payload (schemaless, or already framed with its schema id), the key and the
headers. It is all a spool needs to publish the event later, possibly from
another process, so it is also what the spool writes to disk.
"""

from __future__ import annotations

import dataclasses
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


# On disk: crc32(u32) | body length(u32) | body; the CRC covers the body so a torn tail
# or damaged bytes left by a crash are recognised, never half-published, and the next
# intact record after them is found again (`scan_records`).
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
    """The whole, intact records at the start of `data`, and how many bytes they span.

    Stops at the first frame that is cut short, fails its CRC or cannot be
    read; `scan_records` reads on past it.
    """
    scan = scan_records(data)
    if not scan.damage:
        return scan.records, len(data)
    stop = scan.damage[0].start
    return scan.records[:sum(1 for start, _ in scan.frames if start < stop)], stop


# A body holds at least its fixed head; a frame claiming less (zeros, say) is not a record.
_MIN_BODY = _BODY_HEAD.size


@dataclass(frozen=True, slots=True)
class Damage:
    """Bytes of a segment that hold no readable record, and how many records they cost.

    `kind`: "torn-tail" (the last frame is shorter than it says: a write cut
    short), "corrupt" (bytes that fail the CRC, followed by intact records or
    not) or "unreadable" (a frame with a valid CRC this version cannot decode,
    e.g. a newer version's event type). `records` is exact when `exact`, else
    an estimate: a damaged length field hides where the next record began, so
    the span's size is divided by the segment's mean intact frame, and never
    below the frames the length fields still lead through.
    """

    kind: str
    start: int
    end: int
    records: int
    exact: bool


@dataclass(slots=True)
class SegmentScan:
    """Every readable record of a segment (with its frame's span), and every damaged span."""

    records: list[Record]
    frames: list[tuple[int, int]]
    damage: list[Damage]

    def lost(self) -> dict[str, int]:
        """Records lost, by kind of damage."""
        out: dict[str, int] = {}
        for d in self.damage:
            out[d.kind] = out.get(d.kind, 0) + d.records
        return out


def scan_records(data: bytes) -> SegmentScan:
    """Every intact record in `data`, resynchronising after damage at the next valid frame.

    The CRC framing makes resynchronising safe: after a frame that is cut
    short or fails its CRC, the next offset holding a whole frame whose CRC
    matches is taken as the next record (a false match is a 1 in 2^32 event).
    """
    scan = SegmentScan([], [], [])
    view = memoryview(data)
    pos, end = 0, len(data)
    while pos < end:
        body_end = _intact_frame_end(view, pos, end)
        if body_end is not None:
            try:
                record = _decode_body(bytes(view[pos + _FRAME.size:body_end]))
            except (IndexError, ValueError, struct.error):  # UnicodeDecodeError is a ValueError
                scan.damage.append(Damage("unreadable", pos, body_end, 1, True))
            else:
                scan.records.append(record)
                scan.frames.append((pos, body_end))
            pos = body_end
            continue
        resume = _next_intact_frame(view, pos + 1, end)
        if resume is None and _cut_short(view, pos, end):
            scan.damage.append(Damage("torn-tail", pos, end, 1, True))
            break
        stop = end if resume is None else resume
        records, exact = _frames_between(view, pos, stop)
        scan.damage.append(Damage("corrupt", pos, stop, records, exact))
        pos = stop
    if scan.frames:
        _estimate(scan)
    return scan


def _estimate(scan: SegmentScan) -> None:
    """Inexact counts of lost records from the damaged span's size and the mean intact frame."""
    mean = sum(end - start for start, end in scan.frames) / len(scan.frames)
    scan.damage[:] = [
        d if d.exact else dataclasses.replace(
            d, records=max(d.records, round((d.end - d.start) / mean)))
        for d in scan.damage]


def _intact_frame_end(view: memoryview, pos: int, end: int) -> int | None:
    """Where the frame at `pos` ends if it is whole and its CRC matches, else None."""
    if pos + _FRAME.size + _MIN_BODY > end:
        return None
    crc, length = _FRAME.unpack_from(view, pos)
    body_end = pos + _FRAME.size + length
    if length < _MIN_BODY or body_end > end or view[pos + _FRAME.size + 1] > 1:
        return None  # (the body's second byte is the `framed` flag: 0 or 1; checked first, cheap)
    return body_end if zlib.crc32(view[pos + _FRAME.size:body_end]) == crc else None


def _next_intact_frame(view: memoryview, pos: int, end: int) -> int | None:
    while pos < end:
        if _intact_frame_end(view, pos, end) is not None:
            return pos
        pos += 1
    return None


def _cut_short(view: memoryview, pos: int, end: int) -> bool:
    """Does the frame at `pos` claim more bytes than the segment has left (a write cut short)?"""
    if pos + _FRAME.size > end:
        return True
    _, length = _FRAME.unpack_from(view, pos)
    return length >= _MIN_BODY and pos + _FRAME.size + length > end


def _frames_between(view: memoryview, pos: int, stop: int) -> tuple[int, bool]:
    """How many frames span [pos, stop), following their length fields: (count, exact).

    Exact when the lengths lead exactly to `stop`; otherwise one of them is
    damaged and the count (the frames walked, plus the one the walk broke on)
    is a lower bound.
    """
    count = 0
    while pos != stop:
        if pos + _FRAME.size > stop:
            return max(count, 1), False
        _, length = _FRAME.unpack_from(view, pos)
        following = pos + _FRAME.size + length
        if length < _MIN_BODY or following > stop:
            return count + 1, False
        count, pos = count + 1, following
    return count, True


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

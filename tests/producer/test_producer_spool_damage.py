"""A dead producer's spool that a crash (or a newer version) left damaged: read on, count, keep.

A segment is adopted by the next process; damage in it (a zeroed byte, a
zeroed page, a torn tail, a record of an event type this version does not
know, a directory named like a segment) must cost only the records it
touches, each counted by kind, and the original segment is set aside in
`<root>/corrupt/`, never deleted. The hook itself comes up whatever it finds.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

from rlmesh_stream.producer.records import Record, encode_record, scan_records
from rlmesh_stream.producer.spool import SET_ASIDE_DIR, Spool
from rlmesh_stream.schemas.contract.topics import EventType

RECORDS = 71  # about 23.6 KB in one segment: a torn tail lands inside a record


def _record(seq: int) -> Record:
    return Record(EventType.STEP_COMPLETED, b"session-1", b"p" * 280 + b"%d" % seq, True,
                  [("rlmesh.ps", b"dead:%d" % seq)], seq)


def _dead_spool(root: Path, records: int = RECORDS) -> tuple[Path, list[tuple[int, int]]]:
    """A segment left by a dead owner, and each record's (start, end) in it."""
    dead = Spool(root, "dead")
    for seq in range(records):
        assert dead.put(_record(seq))
    dead.close()
    (segment,) = (root / "dead").glob("*.seg")
    spans, pos = [], 0
    for seq in range(records):
        size = len(encode_record(_record(seq)))
        spans.append((pos, pos + size))
        pos += size
    return segment, spans


def _damage(segment: Path, start: int, end: int, fill: int = 0) -> bytes:
    data = bytearray(segment.read_bytes())
    data[start:end] = bytes([fill]) * (end - start)
    segment.write_bytes(bytes(data))
    return bytes(data)


def _drain(spool: Spool) -> list[int]:
    out = []
    while (batch := spool.take()) is not None:
        out.extend(r.sequence for r in batch.records)
        batch.release()
    return out


def _unknown_event_frame(index: int) -> bytes:
    """A frame with a valid CRC whose event index this version does not have (a newer one's)."""
    body = struct.pack("<BBqHH", index, 1, 999, 1, 0) + b"k" + b"payload"
    return struct.pack("<II", zlib.crc32(body), len(body)) + body


def test_a_byte_zeroed_in_the_middle_costs_only_its_own_record(tmp_path):
    segment, spans = _dead_spool(tmp_path)
    start, end = spans[13]
    _damage(segment, (start + end) // 2, (start + end) // 2 + 1)

    heir = Spool(tmp_path, "heir")

    assert _drain(heir) == [s for s in range(RECORDS) if s != 13]
    assert heir.recovered == RECORDS - 1 and heir.lost == {"spool:corrupt": 1}


def test_a_zeroed_length_field_is_read_past_to_the_next_record(tmp_path):
    segment, spans = _dead_spool(tmp_path)
    _damage(segment, spans[30][0] + 4, spans[30][0] + 8)  # the frame's body length

    heir = Spool(tmp_path, "heir")

    assert _drain(heir) == [s for s in range(RECORDS) if s != 30]
    assert heir.lost == {"spool:corrupt": 1}


def test_a_zeroed_page_loses_only_the_records_it_touches(tmp_path):
    segment, spans = _dead_spool(tmp_path)
    _damage(segment, 8192, 12288)
    touched = [s for s, (start, end) in enumerate(spans) if start < 12288 and end > 8192]

    heir = Spool(tmp_path, "heir")

    assert _drain(heir) == [s for s in range(RECORDS) if s not in touched]
    assert heir.lost == {"spool:corrupt": len(touched)}


def test_records_lost_between_intact_ones_are_counted_exactly_when_their_lengths_hold():
    frames = [encode_record(_record(seq)) for seq in range(10)]
    damaged = [bytearray(f) for f in frames]
    for i in (3, 4, 5):
        damaged[i][-1] ^= 0xFF  # the body, not the length: the lengths still lead on

    scan = scan_records(b"".join(bytes(f) for f in damaged))

    assert [r.sequence for r in scan.records] == [0, 1, 2, 6, 7, 8, 9]
    assert [(d.kind, d.records, d.exact) for d in scan.damage] == [("corrupt", 3, True)]


def test_a_torn_tail_is_one_record_lost_and_named_as_such(tmp_path):
    segment, spans = _dead_spool(tmp_path)
    segment.write_bytes(segment.read_bytes()[:spans[-1][0] + 20])

    heir = Spool(tmp_path, "heir")

    assert _drain(heir) == list(range(RECORDS - 1))
    assert heir.lost == {"spool:torn-tail": 1}


def test_corruption_in_the_middle_is_not_taken_for_a_torn_tail(tmp_path):
    segment, spans = _dead_spool(tmp_path)
    _damage(segment, spans[40][0] + 4, spans[40][0] + 8, fill=0xFF)  # a length past the end

    scan = scan_records(segment.read_bytes())

    assert [d.kind for d in scan.damage] == ["corrupt"]
    assert len(scan.records) == RECORDS - 1


def test_a_damaged_segment_is_set_aside_whole_never_deleted(tmp_path):
    segment, spans = _dead_spool(tmp_path)
    damaged = _damage(segment, spans[13][0] + 100, spans[13][0] + 101)

    heir = Spool(tmp_path, "heir")
    _drain(heir)
    heir.close()

    (kept,) = (tmp_path / SET_ASIDE_DIR).iterdir()
    assert kept.read_bytes() == damaged and not kept.name.endswith(".seg")
    assert heir.set_aside == 1 and not (tmp_path / "dead").exists()


def test_the_repaired_segment_survives_a_crash_before_it_is_drained(tmp_path):
    segment, spans = _dead_spool(tmp_path)
    _damage(segment, spans[13][0] + 100, spans[13][0] + 101)
    first = Spool(tmp_path, "first")
    first.close()  # adopted and repaired, never drained: as a process that died here

    second = Spool(tmp_path, "second")

    assert _drain(second) == [s for s in range(RECORDS) if s != 13]
    assert second.lost == {} and len(list((tmp_path / SET_ASIDE_DIR).iterdir())) == 1


def test_a_record_of_an_unknown_event_type_is_set_aside_and_counted(tmp_path):
    segment, _ = _dead_spool(tmp_path, records=5)
    segment.write_bytes(segment.read_bytes() + _unknown_event_frame(200)
                        + encode_record(_record(5)))

    heir = Spool(tmp_path, "heir")

    assert _drain(heir) == [0, 1, 2, 3, 4, 5]
    assert heir.lost == {"spool:unreadable": 1} and heir.set_aside == 1


def test_a_directory_named_like_a_segment_is_set_aside(tmp_path):
    segment, _ = _dead_spool(tmp_path, records=5)
    (segment.parent / "000000000099.seg").mkdir()

    heir = Spool(tmp_path, "heir")

    assert _drain(heir) == [0, 1, 2, 3, 4]
    assert heir.set_aside == 1
    assert [p.is_dir() for p in (tmp_path / SET_ASIDE_DIR).iterdir()] == [True]


def test_the_set_aside_folder_is_not_adopted_as_an_owner(tmp_path):
    segment, spans = _dead_spool(tmp_path)
    _damage(segment, spans[2][0] + 50, spans[2][0] + 51)
    Spool(tmp_path, "first").close()

    second = Spool(tmp_path, "second")

    assert second.set_aside == 0 and (tmp_path / SET_ASIDE_DIR).is_dir()

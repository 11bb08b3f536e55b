"""The on-disk spool: ordered, crash-safe, and handed over from a dead process to the next."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from rlmesh_stream.producer.records import Record, decode_records, encode_record
from rlmesh_stream.producer.spool import Spool
from rlmesh_stream.schemas.contract.topics import EventType


def _record(seq: int, payload: bytes = b"payload") -> Record:
    return Record(EventType.STEP_COMPLETED, b"session-1", payload + b"%d" % seq, seq % 2 == 0,
                  [("rlmesh.seq", b"%d" % seq), ("rlmesh.producer_id", b"p1")], seq)


def _drain(spool: Spool) -> list[Record]:
    out = []
    while (batch := spool.take()) is not None:
        out.extend(batch.records)
        batch.release()
    return out


def test_a_record_round_trips_through_its_disk_frame():
    record = _record(7)

    (decoded,), used = decode_records(encode_record(record))

    assert decoded == record and used == len(encode_record(record))


def test_a_torn_tail_is_ignored_and_what_precedes_it_is_kept():
    data = encode_record(_record(1)) + encode_record(_record(2))

    records, used = decode_records(data + encode_record(_record(3))[:-4])

    assert [r.sequence for r in records] == [1, 2] and used == len(data)


def test_a_corrupted_record_stops_the_read_at_that_record():
    first, second = encode_record(_record(1)), bytearray(encode_record(_record(2)))
    second[-1] ^= 0xFF

    records, _ = decode_records(first + bytes(second))

    assert [r.sequence for r in records] == [1]


def test_records_come_back_in_the_order_they_were_put_across_segments(tmp_path):
    spool = Spool(tmp_path, "owner", segment_bytes=300)
    for seq in range(50):
        assert spool.put(_record(seq))

    assert [r.sequence for r in _drain(spool)] == list(range(50))
    assert len(spool) == 0 and spool.nbytes == 0


def test_a_released_batch_deletes_its_segment(tmp_path):
    spool = Spool(tmp_path, "owner")
    spool.put(_record(1))
    batch = spool.take()
    assert batch is not None and list((tmp_path / "owner").glob("*.seg"))

    batch.release()

    assert not list((tmp_path / "owner").glob("*.seg"))


def test_the_size_bound_refuses_records_beyond_it(tmp_path):
    frame = len(encode_record(_record(1)))
    spool = Spool(tmp_path, "owner", max_bytes=frame * 3)

    accepted = [spool.put(_record(seq)) for seq in range(5)]

    assert accepted == [True, True, True, False, False]


def test_a_new_spool_adopts_what_a_closed_one_left(tmp_path):
    first = Spool(tmp_path, "first")
    for seq in range(10):
        first.put(_record(seq))
    first.close()

    second = Spool(tmp_path, "second")

    assert second.recovered == 10
    assert [r.sequence for r in _drain(second)] == list(range(10))
    second.close()
    assert not (tmp_path / "first").exists()


def test_a_live_owners_spool_is_not_adopted(tmp_path):
    first = Spool(tmp_path, "first")
    first.put(_record(1))

    second = Spool(tmp_path, "second")

    assert second.recovered == 0 and len(second) == 0
    first.close()
    second.close()


def test_a_spool_in_a_folder_of_other_things_leaves_them_as_they_are(tmp_path):
    """`--spool-dir` at a folder that holds more than spools (a mistyped path, a project
    folder): its other folders are neither locked, emptied nor removed."""
    (tmp_path / "empty").mkdir()
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("keep me")
    (tmp_path / "notes" / "x.seg.tmp").write_text("not a spool's")
    first = Spool(tmp_path, "first")
    first.put(_record(1))
    first.close()

    second = Spool(tmp_path, "second")

    assert [r.sequence for r in _drain(second)] == [1]
    second.close()
    assert (tmp_path / "empty").is_dir()
    assert sorted(p.name for p in (tmp_path / "notes").iterdir()) == ["todo.txt", "x.seg.tmp"]


def test_records_written_before_a_sigkill_survive_it(tmp_path):
    script = textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_producer_spool import _record
        from rlmesh_stream.producer.spool import Spool
        spool = Spool(__import__("pathlib").Path({str(tmp_path)!r}), "victim")
        for seq in range(100):
            spool.put(_record(seq))
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    done = subprocess.run([sys.executable, "-c", script], cwd=Path(__file__).parents[2],
                          check=False)
    assert done.returncode == -9

    heir = Spool(tmp_path, "heir")

    assert [r.sequence for r in _drain(heir)] == list(range(100))


@given(
    key=st.binary(max_size=64),
    payload=st.binary(max_size=2048),
    framed=st.booleans(),
    sequence=st.integers(min_value=0, max_value=2**62),
    headers=st.lists(st.tuples(st.text(max_size=20), st.binary(max_size=40)), max_size=6),
)
def test_any_record_round_trips_through_its_disk_frame(key, payload, framed, sequence, headers):
    record = Record(EventType.LOG, key, payload, framed, headers, sequence)

    (decoded,), _ = decode_records(encode_record(record))

    assert decoded == record

"""The hook starting on a spool a crash or a newer version left damaged, on the real stack.

It must come up (a damaged segment once raised IndexError / IsADirectoryError in every
later process), deliver every intact record it finds, and account for the lost ones in
`stats()` (they once vanished uncounted).
"""

from __future__ import annotations

import struct
import uuid
import zlib
from pathlib import Path

from rlmesh_stream.producer.encoding import make_encoder
from rlmesh_stream.producer.records import Record, encode_record
from rlmesh_stream.producer.spool import SET_ASIDE_DIR, Spool
from rlmesh_stream.schemas.contract import headers as h
from rlmesh_stream.schemas.contract.topics import EventType
from tests.producer.producer_helpers import read_back
from tests.producer.producer_samples import step

DEAD_PRODUCER = uuid.uuid4().hex


def _left_by_a_dead_producer(root: Path, records: int) -> tuple[Path, list[int]]:
    """A dead producer's segment of unframed step events, and each frame's size."""
    encode = make_encoder("avro").encode
    session = str(uuid.uuid4())
    dead = Spool(root, "dead")
    sizes = []
    for seq in range(records):
        record = Record(EventType.STEP_COMPLETED, session.encode(), encode(step(session, seq)),
                        False, [(h.PRODUCER_SEQUENCE, h.stamp_prefix(DEAD_PRODUCER) + b"%d" % seq)],
                        seq)
        assert dead.put(record)
        sizes.append(len(encode_record(record)))
    dead.close()
    (segment,) = (root / "dead").glob("*.seg")
    return segment, sizes


def _newer_versions_record() -> bytes:
    """A frame with a valid CRC and an event index this version does not have."""
    body = struct.pack("<BBqHH", 200, 0, 7, 1, 0) + b"k" + b"a newer event"
    return struct.pack("<II", zlib.crc32(body), len(body)) + body


def test_the_hook_delivers_what_a_corrupt_spool_holds_and_counts_what_it_lost(
    make_hooks, stream_config, tmp_path,
):
    segment, sizes = _left_by_a_dead_producer(tmp_path, 40)
    data = bytearray(segment.read_bytes())
    data[sum(sizes[:20]) + sizes[20] // 2] = 0  # one byte of record 20, as a crash leaves it
    segment.write_bytes(bytes(data))

    hooks = make_hooks(overflow="spool", spool_dir=tmp_path)
    assert hooks.flush(60) == 0
    landed = read_back(stream_config.bootstrap, stream_config.registry_url,
                       stream_config.topic_prefix, expected=39, decode=False)

    assert sorted(r.sequence for r in landed) == [s for s in range(40) if s != 20]
    stats = hooks.stats()
    assert stats.failed == {"spool:corrupt": 1}
    assert (stats.recovered, stats.delivered, stats.spool_set_aside) == (40, 39, 1)
    assert len(list((tmp_path / SET_ASIDE_DIR).iterdir())) == 1


def test_the_hook_comes_up_on_a_spool_it_cannot_read_and_sets_that_aside(
    make_hooks, stream_config, tmp_path,
):
    segment, _ = _left_by_a_dead_producer(tmp_path, 10)
    segment.write_bytes(segment.read_bytes() + _newer_versions_record())
    (segment.parent / "000000000077.seg").mkdir()  # a directory named like a segment

    hooks = make_hooks(overflow="spool", spool_dir=tmp_path)
    assert hooks.flush(60) == 0
    landed = read_back(stream_config.bootstrap, stream_config.registry_url,
                       stream_config.topic_prefix, expected=10, decode=False)

    assert sorted(r.sequence for r in landed) == list(range(10))
    stats = hooks.stats()
    assert stats.failed == {"spool:unreadable": 1}
    assert (stats.recovered, stats.delivered, stats.spool_set_aside) == (11, 10, 2)
    assert len(list((tmp_path / SET_ASIDE_DIR).iterdir())) == 2

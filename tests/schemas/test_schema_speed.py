"""The hot-path codec stays well ahead of the generic fastavro path it replaced.

Relative, not absolute, so a loaded CI machine does not make it flaky: ours
measures ~7x faster than fastavro's writer on an idle machine.
"""

from __future__ import annotations

from schemas import bench


def test_our_avro_encoder_beats_fastavro_schemaless_writer_by_2x_on_an_8_lane_step():
    times = bench.run(lanes=8, number=2000)
    ours = times["avro encode (ours)"]
    theirs = times["avro encode (fastavro.schemaless_writer, record dict given)"]
    assert ours * 2 < theirs, times


def test_our_avro_decoder_to_dataclasses_beats_fastavro_to_dicts():
    times = bench.run(lanes=8, number=2000)
    assert times["avro decode (ours, to dataclasses)"] < times[
        "avro decode (fastavro.schemaless_reader, to dicts)"], times

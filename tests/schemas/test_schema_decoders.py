"""`decoders.decoder_for`: which reader decodes a record, and why, in one place."""

from __future__ import annotations

import types

import fastavro

from rlmesh_stream.schemas.codec.avro_reader import AvroReader, warm_projection
from rlmesh_stream.schemas.codec.avro_writer import avro_writer
from rlmesh_stream.schemas.codec.decoders import Reader, decoder_for
from rlmesh_stream.schemas.contract.avro import load_schema
from rlmesh_stream.schemas.contract.topics import EventType
from tests.contract_samples.examples import example

ET = EventType.EPISODE_COMPLETED
ITEMS = ["session_id", "episode_id", "step_count"]


def _v2() -> dict:
    schema = load_schema(ET)
    schema["fields"].append({"name": "note", "type": ["null", "string"], "default": None})
    return schema


def test_records_written_with_our_schema_are_read_by_the_generated_reader():
    assert decoder_for(ET, load_schema(ET)).reader is Reader.GENERATED


def test_records_of_another_writer_schema_are_read_by_fastavro_saying_why():
    choice = decoder_for(ET, _v2())
    assert (choice.reader, "not ours" in choice.why) == (Reader.FASTAVRO, True)


def test_a_projection_of_our_schema_is_read_by_the_generated_python_projection():
    assert decoder_for(ET, projection=True).reader is Reader.PYTHON_PROJECTION


def test_the_chosen_projection_reads_what_the_whole_reader_reads():
    event = example(ET)
    value = avro_writer(ET)(event, b"\x00\x00\x00\x00\x01")
    assert warm_projection(ET, ITEMS)(value, None) == tuple(getattr(event, i) for i in ITEMS)


def test_the_reader_says_which_reader_it_runs():
    parsed = fastavro.parse_schema(_v2())
    assert (AvroReader(ET).choice.reader, AvroReader(ET, parsed).choice.reader) == (
        Reader.GENERATED, Reader.FASTAVRO)


def test_a_projection_compiles_to_a_generated_python_function():
    assert isinstance(warm_projection(ET, ITEMS), types.FunctionType)

"""The Rust seed, parsed, against our Python types, Avro schemas and Protobuf messages.

Every `pub struct` of `../shared/seed/rlmesh-runtime-hook-events.rs.txt` must
exist in all three renderings with the same fields, in order, typed as the
Rust type maps (integer widths included); every `pub enum` must keep its
variants. Swap the seed file and these tests print the diff.
"""

from __future__ import annotations

import pytest

from rlmesh_stream.schemas.contract import bindings, events
from rlmesh_stream.schemas.contract.avro import load_schema
from rlmesh_stream.schemas.contract.topics import EVENT_TYPES
from rlmesh_stream.schemas.registry.proto_defs import message_class
from tests.schemas import rust_seed
from tests.schemas.rust_seed import RustStruct

if not rust_seed.SEED_PATH.exists():
    pytest.fail(f"Rust seed not found at {rust_seed.SEED_PATH} (shared/ beside the clone)",
                pytrace=False)

STRUCTS, ENUMS = rust_seed.load_seed()
EVENT_SCHEMAS = {et.event_class.__name__: load_schema(et) for et in EVENT_TYPES}
PROTO_MESSAGES = {et.event_class.__name__: message_class(et).DESCRIPTOR for et in EVENT_TYPES}


def _avro_record(name: str):
    if name in EVENT_SCHEMAS:
        return EVENT_SCHEMAS[name]
    for schema in EVENT_SCHEMAS.values():  # a nested struct: its first definition anywhere
        found = rust_seed._avro_named(schema).get(name)
        if found is not None:
            return found
    return None


def _proto_message(name: str):
    if name in PROTO_MESSAGES:
        return PROTO_MESSAGES[name]
    for md in PROTO_MESSAGES.values():
        found = md.file.pool.FindMessageTypeByName(f"rlmesh.runtime.v1.{name}") if md else None
        if found is not None:
            return found
    return None


def test_the_seed_defines_the_thirteen_events_and_the_route():
    assert {s for s in STRUCTS if s.endswith("Event")} == set(EVENT_SCHEMAS)
    assert "RuntimeEnvContext" in STRUCTS and "LogLevel" in ENUMS


@pytest.mark.parametrize("struct", STRUCTS.values(), ids=lambda s: s.name)
def test_python_type_mirrors_the_rust_struct(struct: RustStruct):
    assert rust_seed.mismatches_python(struct, getattr(events, struct.name, None)) == []


@pytest.mark.parametrize("struct", STRUCTS.values(), ids=lambda s: s.name)
def test_avro_record_mirrors_the_rust_struct(struct: RustStruct):
    assert rust_seed.mismatches_avro(struct, _avro_record(struct.name), {}, STRUCTS, ENUMS) == []


@pytest.mark.parametrize("struct", STRUCTS.values(), ids=lambda s: s.name)
def test_protobuf_message_mirrors_the_rust_struct(struct: RustStruct):
    assert rust_seed.mismatches_proto(struct, _proto_message(struct.name), STRUCTS, ENUMS) == []


@pytest.mark.parametrize("enum_name", sorted(ENUMS))
def test_python_enum_keeps_the_rust_variants_upper_cased(enum_name):
    cls = getattr(events, enum_name)
    assert [v.upper() for v in ENUMS[enum_name].variants] == [
        m for m in cls.__members__ if m != "UNKNOWN"]


def test_every_avro_enum_symbol_is_a_python_member():
    for full, cls in bindings.ENUM_CLASSES.items():
        name = full.rsplit(".", 1)[1]
        node = _avro_record(name)
        assert node is not None and set(node["symbols"]) == set(cls.__members__), name


def test_a_field_added_to_the_seed_is_reported_for_all_three_renderings():
    text = rust_seed.SEED_PATH.read_text(encoding="utf-8").replace(
        "pub struct SessionFailedEvent {\n    pub session_id: String,",
        "pub struct SessionFailedEvent {\n    pub session_id: String,\n    pub attempt: u32,")
    structs, enums = rust_seed.parse(text)
    struct = structs["SessionFailedEvent"]
    assert [
        bool(rust_seed.mismatches_python(struct, events.SessionFailedEvent)),
        bool(rust_seed.mismatches_avro(struct, _avro_record(struct.name), {}, structs, enums)),
        bool(rust_seed.mismatches_proto(struct, _proto_message(struct.name), structs, enums)),
    ] == [True, True, True]


def test_a_retyped_field_in_the_seed_is_reported_for_all_three_renderings():
    text = rust_seed.SEED_PATH.read_text(encoding="utf-8").replace(
        "pub lane: Option<u32>,", "pub lane: Option<u64>,")
    structs, enums = rust_seed.parse(text)
    struct = structs["RuntimeEnvContext"]
    assert [
        rust_seed.mismatches_python(struct, events.RuntimeEnvContext),
        bool(rust_seed.mismatches_avro(struct, _avro_record(struct.name), {}, structs, enums)),
        bool(rust_seed.mismatches_proto(struct, _proto_message(struct.name), structs, enums)),
    ] == [[], True, True]  # Python has one int type: its width lives in the schemas


def _all_records(node, out):
    if isinstance(node, list):
        for n in node:
            _all_records(n, out)
    elif isinstance(node, dict):
        if node["type"] == "record":
            out[node["name"]] = node
            for f in node["fields"]:
                _all_records(f["type"], out)
        elif node["type"] == "array":
            _all_records(node["items"], out)
        elif node["type"] == "map":
            _all_records(node["values"], out)


def test_every_field_of_every_avro_record_has_a_doc():
    records: dict = {}
    for schema in EVENT_SCHEMAS.values():
        _all_records(schema, records)
    undocumented = [f"{r['name']}.{f['name']}" for r in records.values() for f in r["fields"]
                    if not f.get("doc")]
    assert (undocumented, len(records) > len(EVENT_SCHEMAS)) == ([], True)


def test_every_named_avro_type_is_named_as_its_rust_or_protobuf_type():
    records: dict = {}
    for schema in EVENT_SCHEMAS.values():
        _all_records(schema, records)
    expected = {*EVENT_SCHEMAS, "RuntimeEnvContext", "Advisory", "Snapshot", "Row", "Source",
                "Metric", "MetaMap", "MetaList", "SpaceSpec", "BoxSpec", "UniformBounds",
                "ElementwiseBounds", "DiscreteSpec", "MultiBinarySpec", "MultiDiscreteSpec",
                "TextSpec", "DictSpec", "TupleSpec"}
    assert set(records) == expected

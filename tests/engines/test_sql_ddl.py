"""The engine DDL and reader schemas are generated from the contract: exact SQL types, the
fields SQL cannot type left out with their reason (never read as null), and the reader
schema resolves against what our writer writes."""

from __future__ import annotations

import io
import re
from pathlib import Path

import fastavro
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from rlmesh_stream.consumers.flink import VIEW_NAMES
from rlmesh_stream.consumers.flink.episodes import episodes_view
from rlmesh_stream.consumers.flink.render import view_columns
from rlmesh_stream.consumers.tables import EPISODES
from rlmesh_stream.infra.schemas_cli import schemas
from rlmesh_stream.schemas.codec.serde import EventEncoder
from rlmesh_stream.schemas.contract.avro import load_schema
from rlmesh_stream.schemas.contract.topics import EVENT_TYPES, EventType
from rlmesh_stream.schemas.engines.flink import FlinkOptions, create_table, value_columns
from rlmesh_stream.schemas.engines.reader import reader_schema
from tests.contract_samples.strategies import events, exact
from tests.engines.engine_values import expected_row

_OPTIONS = FlinkOptions("127.0.0.1:9092", "http://127.0.0.1:8081/apis/ccompat/v7")


def test_only_the_recursive_and_multi_branch_fields_are_left_out() -> None:
    omitted = {(et.value, o.path) for et in EVENT_TYPES for o in reader_schema(et).omitted}
    assert omitted == {
        ("episode_completed", "final_info"), ("step_completed", "infos"),
        ("observation_emitted", "infos"), ("action_received", "action_space.spec"),
        ("observation_emitted", "observation_space.spec"),
    }


def test_a_left_out_field_is_named_with_its_reason_in_the_ddl() -> None:
    ddl = create_table(EventType.EPISODE_COMPLETED, _OPTIONS)
    assert "-- left out: final_info: MetaMap is recursive" in ddl
    assert "`final_info`" not in ddl.split("CREATE TABLE")[1].split("WITH")[0]


def test_a_space_keeps_the_fields_sql_can_type() -> None:
    columns = dict(value_columns(reader_schema(EventType.ACTION_RECEIVED)))
    assert columns["action_space"] == \
        "ROW<`shape` ARRAY<BIGINT NOT NULL> NOT NULL, `dtype` STRING NOT NULL> NOT NULL"


@pytest.mark.parametrize("et", EVENT_TYPES, ids=lambda et: et.value)
def test_every_avro_long_is_a_bigint(et: EventType) -> None:
    for name, ftype in value_columns(reader_schema(et)):
        assert not re.search(r"\bINT\b", ftype), (name, ftype)


def test_the_ddl_reads_key_metadata_and_bounded_when_asked() -> None:
    ddl = create_table(EventType.LOG, FlinkOptions(
        _OPTIONS.bootstrap, _OPTIONS.registry_url, "acme.rl", bounded=True))
    for needed in ("`kafka_key` STRING", "METADATA FROM 'partition'", "METADATA FROM 'offset'",
                   "METADATA FROM 'timestamp'", "METADATA FROM 'headers'",
                   "'topic' = 'acme.rl.log'", "'value.format' = 'avro-confluent'",
                   "'value.avro-confluent.url' = 'http://127.0.0.1:8081/apis/ccompat/v7'",
                   "'scan.bounded.mode' = 'latest-offset'", "`level` STRING NOT NULL"):
        assert needed in ddl, needed


@pytest.mark.parametrize("et", EVENT_TYPES, ids=lambda et: et.value)
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_the_reader_schema_reads_what_our_writer_wrote(et: EventType, data: st.DataObject
                                                       ) -> None:
    event = data.draw(events(et))
    reader = reader_schema(et)
    payload = EventEncoder("avro").encode(event)
    got = fastavro.schemaless_reader(io.BytesIO(payload), fastavro.parse_schema(load_schema(et)),
                                     fastavro.parse_schema(reader.schema))
    assert exact(got) == exact(expected_row(reader, event, base64_bytes=False))


def test_the_episodes_view_has_every_column_but_the_metamap() -> None:
    assert [c.name for c in view_columns(EPISODES)] == \
        [c.name for c in EPISODES.columns if c.name != "final_info"]
    view = episodes_view().create_sql()
    assert "FROM `episode_started`" in view and "FROM `session_failed`" in view
    assert "-- differs: left out: final_info" in view


def test_schemas_sql_writes_one_file_per_topic_and_per_view(tmp_path: Path) -> None:
    result = CliRunner().invoke(schemas, ["sql", "--engine", "flink", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [f"{et.value}.sql" for et in EVENT_TYPES] + [f"{v}_view.sql" for v in VIEW_NAMES])


def test_schemas_sql_for_spark_writes_reader_schemas_and_a_program(tmp_path: Path) -> None:
    result = CliRunner().invoke(schemas, ["sql", "--engine", "spark", "--topic-prefix", "acme",
                                          "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    for et in EVENT_TYPES:
        fastavro.parse_schema(__import__("json").loads(
            (tmp_path / f"acme.{et.value}.avsc").read_text()))
    program = (tmp_path / "read_topics.py").read_text()
    compile(program, "read_topics.py", "exec")
    assert "acme.episode_completed: final_info: MetaMap is recursive" in program
    assert '"mode": "FAILFAST"' in program


def test_schemas_sql_names_an_unknown_engine() -> None:
    result = CliRunner().invoke(schemas, ["sql", "--engine", "hive"])
    assert result.exit_code == 2
    assert "Error: Invalid value for '--engine'" in result.output


def test_schemas_sql_names_a_folder_it_cannot_write(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = CliRunner().invoke(schemas, ["sql", "--engine", "flink", "--out",
                                          str(blocker / "sub")])
    assert result.exit_code == 2  # refused as the line is parsed, nothing written
    assert "Error: Invalid value for '--out'" in result.output
    assert f"'{blocker}' is a file, not a folder" in result.output
    assert "Traceback" not in result.output

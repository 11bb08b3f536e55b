"""Trajectory records another producer wrote with a compatible newer schema (one optional
field more): the export reads them decoded whole, not packed by the generated reader,
and exports the same episodes, row for row, as from the records written with ours."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.dataset as pads
import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from rlmesh_stream.consumers.datasets.episodes import Filters
from rlmesh_stream.consumers.datasets.export import ExportOptions, run_export
from rlmesh_stream.consumers.datasets.sink import TRAJECTORY_EVENTS
from rlmesh_stream.consumers.runtime import RuntimeOptions
from rlmesh_stream.infra.topics import ensure_topics
from rlmesh_stream.producer.hooks import KafkaRuntimeHooks
from rlmesh_stream.producer.simulator import simulate_fleet
from rlmesh_stream.schemas.codec.wire import frame
from rlmesh_stream.schemas.connection.config import StreamConfig
from rlmesh_stream.schemas.contract.avro import load_schema
from rlmesh_stream.schemas.contract.topics import EventType, subject_name
from tests.publishing import close_delivered
from tests.record_copies import copy_records, new_prefix

pytestmark = pytest.mark.stack
PARTITIONS = 2


@dataclass(frozen=True)
class Fleets:
    """One fleet (vector sessions and single-lane ones) published by the hook (`ours`),
    and its copy whose trajectory records are written with a v2 of each schema (`newer`)."""

    ours: StreamConfig
    newer: StreamConfig
    rewritten: int  # records of the copy written with a v2
    episodes: int  # the fleet's episodes, every one exportable


def _v2(et: EventType) -> dict[str, Any]:
    schema = load_schema(et)
    schema["fields"].append({"name": "note", "type": ["null", "string"], "default": None})
    return schema


@pytest.fixture(scope="module")
def fleets(stack: Any) -> Iterator[Fleets]:
    ours, newer = new_prefix(stack), new_prefix(stack)
    for config in (ours, newer):
        ensure_topics(config, partitions=PARTITIONS)
    hooks = KafkaRuntimeHooks(config=ours, install_exit_handlers=False)
    # every episode exportable: the vector sessions autoreset NEXT_STEP, the single-lane
    # ones reset in place
    episodes = sum(len(simulate_fleet(hooks, sessions=4, lanes=lanes, episodes=3, seed=seed,
                                      failure_rate=0.0, next_step_fraction=fraction).episodes)
                   for lanes, seed, fraction in ((3, 11, 1.0), (1, 12, 0.0)))
    close_delivered(hooks)
    client = SchemaRegistryClient(newer.registry_config())
    v2_ids = {et.topic(ours.topic_prefix): client.register_schema(
        subject_name(et.topic(newer.topic_prefix)), Schema(json.dumps(_v2(et)), "AVRO"))
        for et in TRAJECTORY_EVENTS}
    rewritten = 0

    def as_v2(topic: str, value: bytes) -> bytes:
        """The same record under the v2 (its new field's null branch, one 0 byte, last)."""
        nonlocal rewritten
        if topic not in v2_ids:
            return value
        rewritten += 1
        return frame(v2_ids[topic], value[5:] + b"\x00")

    copy_records(ours, newer, revalue=as_v2)
    yield Fleets(ours, newer, rewritten, episodes)


def _exported(config: StreamConfig, out: Path) -> dict[str, list[dict[str, Any]]]:
    sink, _ = run_export(
        config, ExportOptions(out, "parquet", "rlmesh/newer-v0", Filters()),
        RuntimeOptions(group_id=f"newer-{uuid.uuid4().hex[:8]}", from_beginning=True,
                       until_end=True))
    assert sink.certificate_summary()["dead_letters"] == 0
    tables = {}
    for name, key in (("episodes", ("session_id", "episode_record_id")),
                      ("steps", ("session_id", "episode_record_id", "step"))):
        rows = pads.dataset(out / name, partitioning="hive").to_table().to_pylist()
        tables[name] = sorted(rows, key=lambda r: tuple(r[k] for k in key))
    return tables


def test_records_of_a_newer_schema_export_the_same_episodes_as_ours(
        fleets: Fleets, tmp_path: Path) -> None:
    ours = _exported(fleets.ours, tmp_path / "ours")
    newer = _exported(fleets.newer, tmp_path / "newer")
    assert fleets.rewritten > 0 and len(ours["episodes"]) == fleets.episodes
    assert newer == ours

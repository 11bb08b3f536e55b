"""Records another producer keyed otherwise than by their session id: an Iceberg export,
which holds each partition's sessions apart, dead-letters them by name; a Parquet
export, one joiner for every partition, takes them as they are."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.dataset as pads
import pytest

from rlmesh_stream.consumers.datasets.episodes import Filters
from rlmesh_stream.consumers.datasets.export import ExportOptions, run_export
from rlmesh_stream.consumers.datasets.iceberg import IcebergTarget
from rlmesh_stream.consumers.runtime import RuntimeOptions
from rlmesh_stream.infra.topics import ensure_topics
from rlmesh_stream.producer.hooks import KafkaRuntimeHooks
from rlmesh_stream.producer.simulator import simulate_fleet
from rlmesh_stream.schemas.connection.config import StreamConfig
from rlmesh_stream.schemas.contract.topics import EventType
from tests.publishing import close_delivered
from tests.record_copies import copy_records, new_prefix, read_records

pytest.importorskip("pyiceberg")
pytestmark = [pytest.mark.stack, pytest.mark.slow]
PARTITIONS = 4
TABLE = "rl.keys"


@dataclass(frozen=True)
class Copied:
    """A fleet published by the hook (`original`) and its copy (`copy`), record for
    record, but for one session's observations: keyed otherwise, in the next partition."""

    original: StreamConfig
    copy: StreamConfig
    session: str  # the session whose observations were keyed otherwise
    rekeyed: int  # how many


@pytest.fixture(scope="module")
def copied(stack: Any) -> Iterator[Copied]:
    original, copy = new_prefix(stack), new_prefix(stack)
    for config in (original, copy):
        ensure_topics(config, partitions=PARTITIONS)
    hooks = KafkaRuntimeHooks(config=original, install_exit_handlers=False)
    simulate_fleet(hooks, sessions=12, lanes=2, episodes=3, seed=7, failure_rate=0.0)
    close_delivered(hooks)
    observations = EventType.OBSERVATION_EMITTED.topic(original.topic_prefix)
    moved: list[bytes] = []

    def rekey(topic: str, key: bytes, partition: int) -> tuple[bytes, int]:
        """The first session's observations: keyed otherwise, in the next partition."""
        if topic == observations and key == (moved[:1] or [key])[0]:
            moved.append(key)
            return key + b"-obs", (partition + 1) % PARTITIONS
        return key, partition

    copy_records(original, copy, change=rekey)
    session, rekeyed = moved[0].decode(), len(moved)
    yield Copied(original, copy, session, rekeyed)


def _runtime(name: str) -> RuntimeOptions:
    return RuntimeOptions(group_id=f"{name}-{uuid.uuid4().hex[:8]}", from_beginning=True,
                          until_end=True)


def _parquet(config: StreamConfig, out: Path) -> list[dict[str, Any]]:
    run_export(config, ExportOptions(out, "parquet", "rlmesh/keys-v0", Filters()),
               _runtime("parquet"))
    return _sorted(pads.dataset(out / "episodes", partitioning="hive").to_table()
                   .drop_columns(["env"]))


def _sorted(table: Any) -> list[dict[str, Any]]:
    return list(table.sort_by([("session_id", "ascending"),
                               ("episode_record_id", "ascending")]).to_pylist())


def _iceberg(config: StreamConfig, catalog: Path, group: str) -> tuple[Any, Any]:
    target = IcebergTarget(f"sqlite:///{catalog}", TABLE)
    return run_export(config, ExportOptions(None, "iceberg", TABLE, Filters(), iceberg=target,
                                            group=group),
                      RuntimeOptions(group_id=group, from_beginning=True, until_end=True))


def _iceberg_episodes(catalog: Path) -> list[dict[str, Any]]:
    from pyiceberg.catalog.sql import SqlCatalog

    cat = SqlCatalog("rlmesh", uri=f"sqlite:///{catalog}", init_catalog_tables="false",
                     warehouse=(catalog.parent / "warehouse").as_uri())
    return _sorted(cat.load_table(f"{TABLE}_episodes").scan().to_arrow())


def _dead_letter_errors(config: StreamConfig) -> list[str]:
    return [dict(m.headers())["rlmesh.dlq.error"].decode()
            for m in read_records(config, [f"{config.topic_prefix}.dlq"])]


def test_an_iceberg_export_dead_letters_records_not_keyed_by_their_session_id(
        copied: Copied, tmp_path: Path) -> None:
    clean = _parquet(copied.original, tmp_path / "clean")

    sink, _ = _iceberg(copied.copy, tmp_path / "catalog.db", "g-keys")

    summary = sink.certificate_summary()
    assert summary["dead_letters"] == copied.rekeyed > 0
    errors = _dead_letter_errors(copied.copy)
    assert len(errors) == copied.rekeyed
    assert all(e.startswith("WrongKeyError: the record has key b'") for e in errors), errors[0]
    assert _iceberg_episodes(tmp_path / "catalog.db") == [
        r for r in clean if r["session_id"] != copied.session]


def test_records_keyed_otherwise_hold_no_iceberg_shard_back_for_the_next_run(
        copied: Copied, tmp_path: Path) -> None:
    """The stray observations used to sit in the other shard's joiner as a session never
    ended, holding its resume offsets back: every later run read them again."""
    catalog = tmp_path / "catalog.db"
    _iceberg(copied.copy, catalog, "g-again")

    _, rerun = _iceberg(copied.copy, catalog, "g-again")

    assert rerun.events == 0


def test_a_parquet_export_joins_records_keyed_otherwise_as_they_are(
        copied: Copied, tmp_path: Path) -> None:
    assert _parquet(copied.copy, tmp_path / "copy") == _parquet(copied.original,
                                                                tmp_path / "clean")

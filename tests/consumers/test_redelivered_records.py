"""Re-delivered records (the hook's spool replayed, an acknowledgement lost: the same key,
value and `rlmesh.ps` header again) are dropped before any builder sees them: the tables
over a copy of a fleet with re-deliveries are the original's, and only the delivery
check counts the duplicates. Duplicates were counted as events (telemetry counts and
averages, advisory counts)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from rlmesh_stream.infra.topics import ensure_topics
from rlmesh_stream.producer.hooks import KafkaRuntimeHooks
from rlmesh_stream.producer.simulator import simulate_fleet
from rlmesh_stream.schemas.connection.config import StreamConfig
from tests.consumers.consumer_helpers import query, run_offline
from tests.publishing import close_delivered
from tests.record_copies import copy_records, new_prefix, redelivered

pytestmark = [pytest.mark.stack, pytest.mark.slow]

EVERY, LATER = 40, 25  # every 40th record re-delivered 25 records later
# every table a builder writes (the delivery check's and the offsets differ: the copy has
# more records), whole but for the steps' record offsets
TABLES = {t: "*" for t in ("episodes", "episode_session_ends", "sessions", "advisories",
                           "telemetry_rollups", "telemetry_sessions")}
TABLES["steps"] = "* EXCLUDE (step_offset)"


@dataclass
class Copies:
    original: StreamConfig
    copy: StreamConfig  # every EVERY-th record again, LATER records on
    records: int  # records of the original
    repeated: int  # records written twice


@pytest.fixture(scope="module")
def copies(stack: Any) -> Iterator[Copies]:
    original, copy = new_prefix(stack), new_prefix(stack)
    for config in (original, copy):
        ensure_topics(config, partitions=3)
    hooks = KafkaRuntimeHooks(config=original, install_exit_handlers=False)
    simulate_fleet(hooks, sessions=12, lanes=2, episodes=3, seed=3, failure_rate=0.2,
                   window_every=3, lane_driven=2)
    close_delivered(hooks)
    records = copy_records(original, copy, repeat_every=EVERY, repeat_later=LATER)
    yield Copies(original, copy, len(records), len(records) // EVERY)


def _tables(url: str) -> dict[str, list[str]]:
    return {t: sorted(repr(r) for r in query(url, f"SELECT {cols} FROM {t}"))
            for t, cols in TABLES.items()}


def _built(config: StreamConfig, path: Path, **options: Any) -> str:
    url = f"duckdb://{path}"
    run_offline(config, url, steps=True, **options)
    return url


def test_consume_all_over_redelivered_records_builds_the_originals_tables(
        copies: Copies, tmp_path: Path) -> None:
    original = _tables(_built(copies.original, tmp_path / "original.duckdb"))

    copied = _tables(_built(copies.copy, tmp_path / "copy.duckdb"))

    assert {t: len(rows) for t, rows in original.items()}["telemetry_rollups"] > 0
    for table in TABLES:
        assert copied[table] == original[table], table


def test_the_delivery_check_still_counts_every_redelivered_record(
        copies: Copies, tmp_path: Path) -> None:
    url = _built(copies.copy, tmp_path / "copy.duckdb")

    assert query(url, "SELECT SUM(duplicates), SUM(gaps) FROM delivery_producers") == [
        (copies.repeated, 0)]


def test_a_replay_read_by_the_next_run_is_dropped_too(
        copies: Copies, stack: Any, tmp_path: Path) -> None:
    """The duplicates of records a previous run applied (a spool replayed after the
    consumer's restart): what tells them apart is stored with the offsets, in small
    checkpoints."""
    halves = new_prefix(stack)
    ensure_topics(halves, partitions=3)
    written = len(redelivered(list(range(copies.records)), EVERY, LATER))
    url = f"duckdb://{tmp_path / 'halves.duckdb'}"
    group = f"g-{uuid.uuid4().hex[:8]}"
    for part in (slice(0, written // 2), slice(written // 2, None)):
        copy_records(copies.original, halves, repeat_every=EVERY, repeat_later=LATER,
                     part=part)
        run_offline(halves, url, steps=True, group_id=group, max_batch=200)

    assert _tables(url) == _tables(_built(copies.original, tmp_path / "original.duckdb"))


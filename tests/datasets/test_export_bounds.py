"""The export certificate is bounded whatever the producers' delivery headers say: its
sums fit a JVM long, and its per-producer part stays small when the producer id changes
on every record."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from rlmesh_stream.consumers.datasets.certificate import INT64_MAX, MAX_PRODUCERS
from rlmesh_stream.consumers.datasets.episodes import Filters
from rlmesh_stream.consumers.datasets.export import ExportOptions, run_export
from rlmesh_stream.consumers.runtime import RuntimeOptions
from rlmesh_stream.producer.simulator import simulate_fleet
from rlmesh_stream.schemas.connection.config import StreamConfig
from rlmesh_stream.schemas.contract import headers as h
from rlmesh_stream.schemas.contract.topics import EventType
from tests.record_copies import new_prefix, read_records

pytestmark = pytest.mark.stack

_STAMPS = {h.PRODUCER_SEQUENCE, h.PRODUCER_ID, h.SEQUENCE}


def _copy_stamped(original: StreamConfig, copy: StreamConfig,
                  stamp: Any) -> int:
    """Every record of `original` into `copy`'s topics, its delivery stamp replaced by
    `stamp(i)` (producer id, sequence) for the i-th record. Returns how many."""
    prefix = original.topic_prefix
    records = read_records(original, [et.topic(prefix) for et in EventType])
    producer = Producer({"bootstrap.servers": copy.bootstrap})
    for i, m in enumerate(records):
        producer_id, seq = stamp(i)
        headers = [(k, v) for k, v in (m.headers() or []) if k not in _STAMPS]
        headers += [(h.PRODUCER_ID, producer_id.encode()), (h.SEQUENCE, str(seq).encode())]
        producer.produce(copy.topic_prefix + m.topic().removeprefix(prefix), m.value(),
                         m.key(), m.partition(), headers=headers)
    assert producer.flush(60) == 0
    return len(records)


def _export(config: StreamConfig, out: Path) -> dict[str, Any]:
    options = ExportOptions(out=out, fmt="parquet", dataset_id="rlmesh/bounds-v0",
                            filters=Filters())
    runtime = RuntimeOptions(group_id=f"export-{out.name}", from_beginning=True,
                             until_end=True, settle_time=5.0)
    sink, _ = run_export(config, options, runtime)
    return sink.store.committed.certificate


@pytest.fixture
def fleet(make_hooks, stream_config: StreamConfig) -> StreamConfig:
    hooks = make_hooks()
    simulate_fleet(hooks, sessions=8, lanes=1, episodes=3, seed=5, failure_rate=0.0)
    hooks.flush(30)
    return stream_config


def test_forged_sequences_near_2_to_the_63_leave_the_sums_within_a_long(
    fleet: StreamConfig, stack: Any, tmp_path: Path,
) -> None:
    copy = new_prefix(stack)
    near = h.MAX_SEQUENCE  # the largest a header may carry
    _copy_stamped(fleet, copy, lambda i: (f"forged-{i % 3}", near - i // 3))

    cert = _export(copy, tmp_path / "ds")

    assert cert["gaps"] == INT64_MAX  # three producers' gaps near 2**63 each: saturated
    assert all(p["gaps"] <= INT64_MAX for p in cert["producers"].values())
    manifest = (tmp_path / "ds" / ".rlmesh-export" / "manifest.json").read_text()
    numbers = [int(n) for n in re.findall(r"-?\d{10,}", manifest)]
    assert max(numbers) <= INT64_MAX


def test_a_producer_id_per_record_keeps_the_certificate_bounded(
    fleet: StreamConfig, stack: Any, tmp_path: Path,
) -> None:
    copy = new_prefix(stack)
    total = _copy_stamped(fleet, copy, lambda i: (f"one-off-{i}", 0))
    assert total > MAX_PRODUCERS  # else nothing to bound

    cert = _export(copy, tmp_path / "ds")

    assert len(cert["producers"]) == MAX_PRODUCERS
    assert cert["other_producers"]["records"] == total - MAX_PRODUCERS
    # what the records say is exported all the same
    assert cert["episodes_exported"] == _export(fleet, tmp_path / "original")[
        "episodes_exported"] > 0
    state = tmp_path / "ds" / ".rlmesh-export"
    pending = json.loads(next(state.glob("pending-*.json")).read_text())
    assert len(pending["certificate"]["producers"]) == MAX_PRODUCERS
    assert (state / "manifest.json").stat().st_size < 250_000

"""An export over a fleet, committed in small batches: the state its journal and last whole
state give back is the state its sink holds, and `export certificate` prints the
certificate the run ended with, producers included."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from rlmesh_stream.consumers.datasets import state
from rlmesh_stream.consumers.datasets.episodes import Filters
from rlmesh_stream.consumers.datasets.export import ExportOptions, make_export
from rlmesh_stream.consumers.datasets.manifest import ManifestStore
from rlmesh_stream.consumers.runtime import RuntimeOptions
from rlmesh_stream.infra.cli import main
from rlmesh_stream.producer.simulator import simulate_fleet
from rlmesh_stream.schemas.connection.config import StreamConfig

pytestmark = pytest.mark.stack


def test_an_exports_journal_gives_back_the_state_its_sink_holds(
        make_hooks, stream_config: StreamConfig, tmp_path: Path) -> None:
    hooks = make_hooks()
    simulate_fleet(hooks, sessions=6, lanes=2, episodes=3, seed=11, failure_rate=0.2)
    hooks.flush(30)
    out = tmp_path / "ds"
    sink, runtime = make_export(
        stream_config, ExportOptions(out, "parquet", "rlmesh/journal-v0", Filters()),
        RuntimeOptions(group_id=f"g-{uuid.uuid4().hex[:8]}", from_beginning=True,
                       until_end=True, max_batch=150, poll_batch=50, settle_time=5.0))
    try:
        runtime.run()  # every record read and committed; the open episodes not decided
        held = {**state.dump(sink.joiner.state(), sink.certificate), "seen": sink.seen}
        certificate = sink.certificate_summary()
        files = sink.store.files
    finally:
        sink.close()
    reopened = ManifestStore(out, fmt="parquet", dataset_id="rlmesh/journal-v0")
    stored = state.replay(*reopened.read_state(), "test")
    reopened.close()
    printed = CliRunner().invoke(main, ["export", "certificate", str(out)])

    assert files.journal_bytes > 0 and files.base_generation < sink.store.committed.generation
    assert held["first"] and held["seen"]  # episodes still open, marks kept
    assert {**stored, "first": sorted(stored["first"])} == {**held,
                                                            "first": sorted(held["first"])}
    assert printed.exit_code == 0, printed.output
    assert json.loads(printed.output) == certificate
    assert certificate["producers"] and certificate["episodes_exported"] > 0

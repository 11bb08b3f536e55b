"""What the certificate counts and what the documented queries group: each episode once."""

from __future__ import annotations

import re
import threading
import time
import uuid
from pathlib import Path

import duckdb
import pyarrow.dataset as pads
import pytest

from rlmesh_stream.consumers.datasets.episodes import Filters
from rlmesh_stream.consumers.datasets.export import ExportOptions, make_export
from rlmesh_stream.consumers.runtime import RuntimeOptions
from tests.datasets.rollouts import balancing, exportable, run_cartpole, run_simulator

pytestmark = pytest.mark.stack
DOCS = Path(__file__).resolve().parents[2] / "docs" / "datasets.md"


def test_a_filtered_episode_is_counted_once_however_many_checkpoints_it_spans(
    make_hooks, stream_config, tmp_path,
):
    sink, runtime = make_export(
        stream_config, ExportOptions(tmp_path / "pq", "parquet", "rlmesh/filtered-v0",
                                     Filters(env_ids=("sim/CartPole-v1",))),
        RuntimeOptions(group_id=f"g-{uuid.uuid4().hex[:8]}", from_beginning=True,
                       checkpoint_interval=0.1))
    thread = threading.Thread(target=runtime.run)
    thread.start()
    try:
        sim = run_simulator(make_hooks)  # the kept env first: the export is then live
        deadline = time.monotonic() + 120
        while len(sink.released) < exportable(sim) and time.monotonic() < deadline:
            time.sleep(0.1)
        # a policy that takes 10 ms a step: each episode's events span many checkpoints
        run_cartpole(make_hooks, [41, 42, 43], policy=lambda obs: (time.sleep(0.01),
                                                                   balancing(obs))[1])
        while (sink.store.committed.certificate.get("episodes_skipped", {}).get("filtered", 0)
               < 3 and time.monotonic() < deadline):
            time.sleep(0.1)
        time.sleep(1.0)  # a few more checkpoints
    finally:
        runtime.stop()
        thread.join(30)
        sink.close()

    cert = sink.store.committed.certificate
    assert sink.store.committed.generation > 10
    assert cert["episodes_exported"] == exportable(sim)
    assert cert["episodes_skipped"].get("filtered") == 3


def _documented_duckdb_query() -> str:
    blocks = re.findall(r"```sql\n(.*?)```", DOCS.read_text(), re.S)
    [query] = [b for b in blocks if "read_parquet('trajectories/steps" in b]
    return query  # over the doc's export into `trajectories` (--out)


def test_the_documented_duckdb_query_gives_one_row_per_episode_of_every_session(
    make_hooks, stream_config, export, tmp_path,
):
    first = run_cartpole(make_hooks, [44, 45])
    second = run_cartpole(make_hooks, [46, 47])  # its record ids are the first's again
    out = tmp_path / "pq"
    export(out, "parquet")

    rows = duckdb.sql(_documented_duckdb_query().replace("'trajectories/", f"'{out}/")
                      ).fetchall()

    episodes = pads.dataset(out / "episodes", partitioning="hive").to_table().to_pylist()
    assert len({e["episode_record_id"] for e in episodes}) == 2  # repeated across sessions
    assert len(rows) == 4
    assert sorted(r[3] for r in rows) == sorted(
        e.steps for e in (*first.episodes, *second.episodes))
    assert {(r[0], r[1], r[3], r[4]) for r in rows} == {
        (e["session_id"], e["episode_record_id"], e["steps"], e["total_reward"])
        for e in episodes}

"""The export's resume state in a dataset directory is data: never a pickle that runs."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from rlmesh_stream.infra.topics import ensure_topics
from rlmesh_stream.producer.hooks import KafkaRuntimeHooks
from rlmesh_stream.producer.simulator import simulate_fleet
from rlmesh_stream.schemas.connection.config import StreamConfig
from tests.publishing import close_delivered

pytestmark = pytest.mark.stack


class _Planted:
    """Unpickling it creates the file named `marker` (what a crafted state could do)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.touch, (self.marker,))


def _cli(config: StreamConfig, out: Path) -> list[str]:
    return [sys.executable, "-m", "rlmesh_stream.infra.cli", "export", "trajectories",
            "--bootstrap", config.bootstrap, "--registry-url", config.registry_url,
            "--topic-prefix", config.topic_prefix, "--out", str(out), "--format", "parquet",
            "--dataset-id", "rlmesh/x-v0", "--from-beginning", "--until-end", "--quiet",
            "--group", f"g-{uuid.uuid4().hex[:8]}"]


@pytest.fixture
def exported(stack: Any, tmp_path: Path) -> tuple[StreamConfig, Path]:
    """A small fleet, exported once into tmp_path/ds (a session left open: state kept)."""
    config = StreamConfig.from_env(env={}, bootstrap=stack.bootstrap,
                                   registry_url=stack.registry_url,
                                   topic_prefix=f"t{uuid.uuid4().hex[:10]}.rlmesh.runtime")
    ensure_topics(config, partitions=2)
    hooks = KafkaRuntimeHooks(config=config, install_exit_handlers=False)
    simulate_fleet(hooks, sessions=2, lanes=2, episodes=2, seed=1)
    close_delivered(hooks)
    out = tmp_path / "ds"
    run = subprocess.run(_cli(config, out), capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    return config, out


def _generation(out: Path) -> int:
    return int(json.loads((out / ".rlmesh-export" / "manifest.json").read_text())["generation"])


def test_the_export_state_is_json(exported: tuple[StreamConfig, Path]) -> None:
    _, out = exported
    state = out / ".rlmesh-export" / f"pending-{_generation(out)}.json"

    assert json.loads(state.read_text())["version"] == 1
    assert not list((out / ".rlmesh-export").glob("*.pkl"))


def test_a_pickle_planted_in_the_dataset_never_runs(exported: tuple[StreamConfig, Path],
                                                    tmp_path: Path) -> None:
    config, out = exported
    marker = tmp_path / "pwned"
    planted = out / ".rlmesh-export" / f"pending-{_generation(out)}.pkl"
    planted.write_bytes(pickle.dumps(_Planted(marker)))

    run = subprocess.run(_cli(config, out), capture_output=True, text=True, timeout=300)

    assert not marker.exists()
    assert run.returncode != 0
    assert run.stderr.strip().splitlines()[-1] == (
        f"Error: {out} holds a pickled export state (an older rlmesh-stream), which is "
        "never loaded (a pickle can run code): export into a new directory")


def test_a_corrupt_state_file_is_refused_in_one_line(exported: tuple[StreamConfig, Path]
                                                     ) -> None:
    config, out = exported
    state = out / ".rlmesh-export" / f"pending-{_generation(out)}.json"
    state.write_text('{"version": 1, "sessions": {"s": "not a list"}}')

    run = subprocess.run(_cli(config, out), capture_output=True, text=True, timeout=300)

    assert run.returncode != 0
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"Error: {out / '.rlmesh-export'} is not a valid export state"), run.stderr

"""Dataset-export fixtures: hooks on the shared stack, and an exporter run in-process."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rlmesh_stream.consumers.datasets.episodes import Filters
from rlmesh_stream.consumers.datasets.export import DatasetSink, ExportOptions, run_export
from rlmesh_stream.consumers.runtime import RuntimeOptions
from rlmesh_stream.producer.hooks import KafkaRuntimeHooks
from rlmesh_stream.schemas.connection.config import StreamConfig


@pytest.fixture
def make_hooks(stream_config: StreamConfig) -> Iterator[Callable[..., KafkaRuntimeHooks]]:
    made: list[KafkaRuntimeHooks] = []

    def make(**overrides: Any) -> KafkaRuntimeHooks:
        overrides.setdefault("install_exit_handlers", False)
        hooks = KafkaRuntimeHooks(config=stream_config, **overrides)
        made.append(hooks)
        return hooks

    yield make
    for hooks in made:
        hooks.close(timeout=5)


@pytest.fixture
def export(stream_config: StreamConfig) -> Callable[..., DatasetSink]:
    """Run `export trajectories --from-beginning --until-end` in this process."""

    def run(out: Path, fmt: str, dataset_id: str = "rlmesh/test-v0", *,
            minari_format: str = "hdf5", max_episode_steps: int | None = None,
            trust_env_spec: bool = False, **filters: Any) -> DatasetSink:
        options = ExportOptions(out=out, fmt=fmt, dataset_id=dataset_id,
                                filters=Filters(**filters), minari_format=minari_format,
                                max_episode_steps=max_episode_steps,
                                trust_env_spec=trust_env_spec)
        runtime = RuntimeOptions(group_id=f"export-{out.name}-{fmt}", from_beginning=True,
                                 until_end=True, settle_time=5.0)
        sink, _ = run_export(stream_config, options, runtime)
        return sink

    return run

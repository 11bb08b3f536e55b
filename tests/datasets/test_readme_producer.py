"""The README's producer snippet and its Minari export command, run as written against the
stack in a fresh working directory: the snippet's episodes are in the dataset."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.stack
README = Path(__file__).resolve().parents[2] / "README.md"


def _block(after: str, lang: str) -> str:
    section = README.read_text().split(after, 1)[1]
    found = re.search(rf"```{lang}\n(.*?)```", section, re.S)
    assert found is not None, f"no {lang} block after {after!r} in README.md"
    return found.group(1)


def _minari_export_command() -> str:
    """The README's first export command (its continuation lines joined)."""
    lines = _block("### Datasets, other engines, metrics", "sh").splitlines()
    command = []
    for line in lines:
        command.append(line.split("  #", 1)[0].rstrip().removesuffix("\\"))
        if not line.split("  #", 1)[0].rstrip().endswith("\\"):
            break
    text = " ".join(command)
    assert "--format minari" in text, text
    return text


def test_the_readme_producer_snippet_and_export_command_run_as_written(
    stream_config, tmp_path,
):
    env = {**os.environ, "RLMESH_STREAM_BOOTSTRAP": stream_config.bootstrap,
           "RLMESH_STREAM_REGISTRY_URL": stream_config.registry_url,
           "RLMESH_STREAM_TOPIC_PREFIX": stream_config.topic_prefix,
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}

    produced = subprocess.run(
        [sys.executable, "-c", _block("### The hook (producer side)", "python")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert produced.returncode == 0, produced.stderr[-3000:]
    stats = dict(re.findall(r"\b(accepted|delivered|dropped)=(\d+)", produced.stdout))
    assert stats["accepted"] == stats["delivered"] != "0", produced.stdout
    assert stats["dropped"] == "0" and "failed={}" in produced.stdout, produced.stdout

    exported = subprocess.run(["bash", "-c", _minari_export_command()],
                              cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=300)
    assert exported.returncode == 0, exported.stdout + exported.stderr[-3000:]

    import minari

    os.environ["MINARI_DATASETS_PATH"] = str(tmp_path / "datasets")
    dataset = minari.load_dataset("rlmesh/CartPole-v1-v0")
    assert dataset.total_episodes == 3
    assert '"episodes_skipped": {}' in exported.stdout
    metas = list(dataset.storage.get_episode_metadata(range(3)))
    assert [m["seed"] for m in metas] == [1, 2, 3]
    assert dataset.recover_environment().spec.id == "CartPole-v1"

"""The README's producer snippet, run as written against the stack: its episodes export."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.stack
README = Path(__file__).resolve().parents[2] / "README.md"


def _producer_snippet() -> str:
    hook_section = README.read_text().split("### The hook (producer side)", 1)[1]
    return re.search(r"```python\n(.*?)```", hook_section, re.S).group(1)


def test_the_readme_producer_snippet_publishes_episodes_a_minari_export_keeps(
    stream_config, export, tmp_path,
):
    run = subprocess.run(
        [sys.executable, "-c", _producer_snippet()], cwd=tmp_path, capture_output=True,
        text=True, timeout=300, env={
            **os.environ, "RLMESH_STREAM_BOOTSTRAP": stream_config.bootstrap,
            "RLMESH_STREAM_REGISTRY_URL": stream_config.registry_url,
            "RLMESH_STREAM_TOPIC_PREFIX": stream_config.topic_prefix})
    assert run.returncode == 0, run.stderr[-3000:]
    stats = dict(re.findall(r"\b(accepted|delivered|dropped)=(\d+)", run.stdout))
    assert stats["accepted"] == stats["delivered"] != "0" and stats["dropped"] == "0", run.stdout
    assert "failed={}" in run.stdout, run.stdout

    sink = export(tmp_path / "ds", "minari", "rlmesh/readme-v0")

    cert = sink.store.committed.certificate
    assert cert["episodes_exported"] == 3
    assert cert["episodes_skipped"] == {}
    assert cert["env_spec"] == "producer"

"""No Avro reader path can take a consumer down: adversarial records end as refusals
(`CorruptPayloadError`, which the consumers dead-letter), never as a crash.

The property runs in a child process (`decoder_paths.py`): a reader that overflows the C
stack dies with SIGSEGV, which would take pytest with it; here it is a return code.
Paths: the generated reader, the projection (our writer schema), and
fastavro (a compatible v2 registered by another producer: a foreign writer schema).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(600)

TESTS = Path(__file__).resolve().parents[1]
PATHS = ["generated", "python projection", "fastavro (foreign writer schema)"]


def test_adversarial_records_are_refused_by_every_reader_path_without_a_crash():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(TESTS), os.environ.get("PYTHONPATH", "")])}
    child = subprocess.run([sys.executable, str(TESTS / "schemas" / "decoder_paths.py")],
                           capture_output=True, text=True, env=env, timeout=540)
    assert child.returncode == 0, (child.returncode, child.stderr[-3000:])
    refused = dict(line.split(": refused ") for line in child.stdout.splitlines())
    assert sorted(refused) == sorted(PATHS)
    assert all(int(n) > 0 for n in refused.values()), refused

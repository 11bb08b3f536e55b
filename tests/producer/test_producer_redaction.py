"""A password inside a URL (`http://user:password@registry`) is never shown by the hook.

Users put registry credentials in the URL as often as in the dedicated
settings; the hook's WARNING lines (Python API and `simulate`) and the
settings' reprs must show `user:***@` instead, through the project's one
redactor (`rlmesh_stream.schemas.connection.access.redact_url`).
"""

from __future__ import annotations

import logging
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from rlmesh_stream.infra import proc
from rlmesh_stream.producer.config import ProducerSettings
from rlmesh_stream.producer.hooks import KafkaRuntimeHooks
from rlmesh_stream.schemas.connection.access import redact_url
from rlmesh_stream.schemas.connection.config import StreamConfig
from tests.producer.producer_samples import step

SECRET = f"s3cret-{uuid.uuid4().hex[:8]}"


def _url_with_password(port: int) -> str:
    return f"http://alice:{SECRET}@127.0.0.1:{port}/apis/ccompat/v7"


@pytest.mark.parametrize(("shown", "expected"), [
    ("http://alice:pw@host:8081/x", "http://alice:***@host:8081/x"),
    ("alice:pw@host", "alice:***@host"),  # typed without a scheme
    ("at http://a:1@h and 'https://b:p:w@k/'", "at http://a:***@h and 'https://b:***@k/'"),
    ("http://host:8081/x", "http://host:8081/x"),  # nothing to hide
    ("https://alice@host/x", "https://alice@host/x"),  # a user without a password
    ("127.0.0.1:9092,127.0.0.1:9093", "127.0.0.1:9092,127.0.0.1:9093"),
])
def test_the_redactor_hides_every_url_password_in_a_text_and_nothing_else(
    shown: str, expected: str,
) -> None:
    assert redact_url(shown) == expected


def test_the_stream_config_repr_shows_no_url_password() -> None:
    config = StreamConfig(registry_url=_url_with_password(8081))

    assert SECRET not in repr(config)
    assert "alice:***@127.0.0.1:8081" in repr(config)


def test_the_producer_settings_repr_shows_no_url_password_nor_librdkafka_secret() -> None:
    settings = ProducerSettings(stream=StreamConfig(registry_url=_url_with_password(8081)),
                                kafka_overrides={"sasl.password": SECRET, "linger.ms": 5})

    assert SECRET not in repr(settings)
    assert "'linger.ms': 5" in repr(settings)


def test_the_hooks_warning_and_settings_show_no_url_password(
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry = _url_with_password(proc.free_port())  # nothing listens: unreachable
    caplog.set_level(logging.WARNING)
    hooks = KafkaRuntimeHooks(config=StreamConfig(bootstrap=f"127.0.0.1:{proc.free_port()}",
                                                  registry_url=registry),
                              startup_wait_s=0, install_exit_handlers=False)
    try:
        hooks.step_completed(step(str(uuid.uuid4()), 0))
        deadline = time.monotonic() + 15
        while "schema registry at" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.1)
        shown = repr(hooks.settings)
    finally:
        hooks.close(1)

    assert "schema registry at http://alice:***@127.0.0.1" in caplog.text
    assert SECRET not in caplog.text + shown


def test_simulate_shows_no_url_password() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "rlmesh_stream.infra.cli", "simulate", "--sessions", "1",
         "--episodes", "1", "--flush-timeout", "4",  # time to find the registry away
         "--bootstrap", f"127.0.0.1:{proc.free_port()}",
         "--registry-url", _url_with_password(proc.free_port())],
        capture_output=True, text=True, timeout=120, check=False,
        cwd=Path(__file__).parents[2])

    assert done.returncode != 0  # nothing could be delivered
    assert "alice:***@" in done.stderr
    assert SECRET not in done.stdout + done.stderr

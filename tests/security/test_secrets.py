"""Security settings come from config and the environment; no secret is ever printed.

Every CLI command that talks to the stack takes `--sasl-*`, `--ssl-ca-location`
and `--registry-*` (or `RLMESH_STREAM_*`); passwords never appear in help
defaults, reprs, `stats()`, logs, error messages or server command lines.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from rlmesh_stream.infra.security import SecureStack
from rlmesh_stream.producer.hooks import KafkaRuntimeHooks
from rlmesh_stream.producer.simulator import simulate_fleet
from rlmesh_stream.schemas.connection.config import StreamConfig

pytestmark = pytest.mark.timeout(300)

CLI = [sys.executable, "-m", "rlmesh_stream.infra.cli"]
COMMANDS = [["consume", "sessions"], ["simulate"], ["tail"], ["topics", "create"],
            ["schemas", "register"]]


def env_of(config: StreamConfig) -> dict[str, str]:
    """The config as RLMESH_STREAM_* variables (how an operator passes secrets)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLMESH_STREAM_")}
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if value is not None:
            env[f"RLMESH_STREAM_{f.name.upper()}"] = str(value)
    return env


def secrets_of(stack: SecureStack) -> list[str]:
    return [c.password for c in stack.users.values()]


def run_cli(args: list[str], env: dict[str, str],
            timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], env=env, capture_output=True, text=True,
                          timeout=timeout, check=False, cwd=Path(__file__).parents[2])


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_help_shows_no_secret_from_the_environment(
    secure_stack: SecureStack, command: list[str],
) -> None:
    env = env_of(secure_stack.config_for("consumer"))
    done = run_cli([*command, "--help"], env)
    assert done.returncode == 0, done.stderr
    assert "--sasl-password" in done.stdout
    for secret in secrets_of(secure_stack):
        assert secret not in done.stdout + done.stderr


def test_config_repr_shows_no_password(secure_stack: SecureStack) -> None:
    config = secure_stack.config_for("producer")
    assert config.sasl_password and config.registry_password
    for text in (repr(config), str(config), repr(secure_stack.users)):
        for secret in secrets_of(secure_stack):
            assert secret not in text


def test_stats_and_logs_of_a_refused_producer_show_no_password(
    secure_stack: SecureStack, caplog: pytest.LogCaptureFixture,
) -> None:
    wrong = f"wrong-{uuid.uuid4().hex}"
    config = dataclasses.replace(secure_stack.config_for("producer"), sasl_password=wrong,
                                 registry_password=wrong)
    with caplog.at_level(logging.DEBUG):
        hooks = KafkaRuntimeHooks(config=config, install_exit_handlers=False, startup_wait_s=3)
        simulate_fleet(hooks, sessions=1, episodes=1)
        stats = hooks.close(3)
    assert "User:producer" in caplog.text
    for text in (caplog.text, repr(stats), repr(hooks.settings)):
        for secret in [wrong, *secrets_of(secure_stack)]:
            assert secret not in text


def test_consume_takes_its_security_settings_from_the_environment(
    secure_stack: SecureStack, tmp_path: Path,
) -> None:
    env = env_of(secure_stack.config_for("consumer"))
    done = run_cli(["consume", "sessions", "--until-end", "--from-beginning", "--quiet",
                    "--sink", f"duckdb://{tmp_path / 't.duckdb'}",
                    "--group", f"rlmesh-stream.cli-{uuid.uuid4().hex[:6]}"], env)
    assert done.returncode == 0, done.stderr[-2000:]
    for secret in secrets_of(secure_stack):
        assert secret not in done.stdout + done.stderr


def test_consume_with_a_wrong_password_fails_with_one_clear_line(
    secure_stack: SecureStack, tmp_path: Path,
) -> None:
    wrong = f"wrong-{uuid.uuid4().hex}"
    env = env_of(dataclasses.replace(secure_stack.config_for("consumer"), sasl_password=wrong))
    done = run_cli(["consume", "sessions", "--until-end", "--quiet",
                    "--sink", f"duckdb://{tmp_path / 't.duckdb'}"], env)
    assert done.returncode == 1
    assert "Error: Kafka at" in done.stderr
    assert "rejected the credentials of User:consumer" in done.stderr
    assert "Traceback" not in done.stderr
    assert wrong not in done.stderr


def test_no_server_has_a_password_on_its_command_line(secure_stack: SecureStack) -> None:
    for name, pid in secure_stack.pids.items():
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        for secret in secrets_of(secure_stack):
            assert secret not in cmdline, name


def test_secret_files_are_readable_by_their_owner_only(secure_stack: SecureStack) -> None:
    assert secure_stack.node is not None and secure_stack.pki is not None
    registry_conf = secure_stack.home / "registry" / "config" / "application.properties"
    for path in (secure_stack.node.properties_file, registry_conf, secure_stack.pki.server_key):
        assert path.stat().st_mode & 0o077 == 0, path

"""CLI output never shows a password given inside a URL (`--registry-url user:pw@host`).

`infra smoke --no-up` (success and failure), `schemas register` (a URL
without a scheme, an unreachable registry) and `tail` (a broker or registry
that does not answer) print `user:***@` through the project's one redactor,
as one `Error:` line where they fail, never a traceback.
"""

from __future__ import annotations

import uuid
from urllib.parse import urlsplit

import pytest
from click.testing import CliRunner, Result

from rlmesh_stream.infra import proc
from rlmesh_stream.infra.cli import main
from rlmesh_stream.schemas.connection.config import StreamConfig

SECRET = f"s3cret-{uuid.uuid4().hex[:8]}"


def _with_password(url: str) -> str:
    parts = urlsplit(url)
    return parts._replace(netloc=f"alice:{SECRET}@{parts.netloc}").geturl()


def _run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def _closed() -> str:
    return f"http://127.0.0.1:{proc.free_port()}/apis/ccompat/v7"


def _shows_no_secret(result: Result) -> None:
    assert SECRET not in result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


@pytest.mark.stack
def test_smoke_that_succeeds_shows_the_registry_url_without_its_password(
    stream_config: StreamConfig,
) -> None:
    result = _run("infra", "smoke", "--no-up", "--bootstrap", stream_config.bootstrap,
                  "--registry-url", _with_password(stream_config.registry_url),
                  "--topic-prefix", stream_config.topic_prefix)

    assert result.exit_code == 0, result.output
    assert "alice:***@" in result.output and "smoke OK" in result.output
    _shows_no_secret(result)


@pytest.mark.stack
def test_smoke_with_the_registry_down_says_so_in_one_line_without_the_password(
    stream_config: StreamConfig,
) -> None:
    result = _run("infra", "smoke", "--no-up", "--bootstrap", stream_config.bootstrap,
                  "--registry-url", _with_password(_closed()), "--registry-timeout", "2",
                  "--topic-prefix", stream_config.topic_prefix)

    assert result.exit_code == 1
    assert [line for line in result.output.splitlines() if line.startswith("Error:")] == [
        result.output.splitlines()[-1]]
    _shows_no_secret(result)


def test_register_with_a_url_without_scheme_names_it_without_the_password() -> None:
    result = _run("schemas", "register", "--registry-url", f"alice:{SECRET}@nowhere")

    assert result.exit_code == 2
    assert "'alice:***@nowhere' is not an http:// or https:// URL" in result.output
    _shows_no_secret(result)


def test_register_against_an_unreachable_registry_shows_no_password() -> None:
    result = _run("schemas", "register", "--registry-url", _with_password(_closed()),
                  "--registry-timeout", "2")

    assert result.exit_code == 1 and "Error:" in result.output
    _shows_no_secret(result)


def test_tail_errors_show_no_password() -> None:
    result = _run("tail", "step_completed", "--bootstrap", f"127.0.0.1:{proc.free_port()}",
                  "--registry-url", _with_password(_closed()), "--count", "1",
                  "--connect-timeout", "1")

    assert result.exit_code == 1 and "Error:" in result.output
    _shows_no_secret(result)

"""Each way `infra up` can fail says, in one line, what went wrong and what to do."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from rlmesh_stream.infra.artifacts import Artifacts
from rlmesh_stream.infra.cli import main
from rlmesh_stream.infra.errors import ArtifactError, JavaError
from rlmesh_stream.infra.java import find_java, java_major_version
from rlmesh_stream.infra.proc import free_port


def _up(home: Path, *extra: str, env: dict[str, str] | None = None) -> Result:
    args = ["infra", "up", "--home", str(home), "--kafka-port", str(free_port()),
            "--registry-port", str(free_port()), *extra]
    return CliRunner().invoke(main, args, env=env)


def _one_line_error(result: Result) -> str:
    assert result.exit_code == 1, result.output
    # Progress lines may come first; the error is the last line, and all on that line.
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("Error: "), result.stderr
    assert sum(line.startswith("Error: ") for line in lines) == 1, result.stderr
    return lines[-1]


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


def test_up_on_a_taken_port_names_the_port_and_the_option(tmp_path: Path, taken_port: int) -> None:
    result = _up(tmp_path, "--kafka-port", str(taken_port))
    message = _one_line_error(result)
    assert f"port {taken_port} (Kafka)" in message and "already in use" in message
    assert "--kafka-port" in message


def test_up_on_a_taken_port_starts_nothing(tmp_path: Path, taken_port: int) -> None:
    _up(tmp_path, "--registry-port", str(taken_port))
    assert not (tmp_path / "state.json").exists()


def test_up_with_a_missing_java_says_to_install_one(tmp_path: Path) -> None:
    empty_jdk = tmp_path / "no-jdk"
    empty_jdk.mkdir()
    result = _up(tmp_path / "home", env={"RLMESH_STREAM_JAVA_HOME": str(empty_jdk)})
    message = _one_line_error(result)
    assert "does not exist" in message and "install a JDK >= 17" in message


def test_no_java_anywhere_is_reported_as_not_found(tmp_path: Path) -> None:
    with pytest.raises(JavaError, match=r"no java was found.*install a JDK >= 17"):
        find_java(17, "Kafka", env={"PATH": str(tmp_path)}, search_roots=())


def _jdk_older_than(major: int) -> Path | None:
    for home in sorted(Path("/usr/lib/jvm").glob("*")):
        version = java_major_version(home / "bin" / "java")
        if version is not None and version < major and not home.is_symlink():
            return home
    return None


def test_up_with_a_too_old_java_names_the_version_needed(tmp_path: Path) -> None:
    old_jdk = _jdk_older_than(21)
    if old_jdk is None:
        pytest.skip("no JDK older than 21 on this machine")
    result = _up(tmp_path, env={"RLMESH_STREAM_JAVA_HOME": str(old_jdk)})
    message = _one_line_error(result)
    assert "Apicurio Registry needs java >= 21" in message and "install a JDK >= 21" in message


def test_up_when_artifacts_cannot_be_fetched_says_how_to_retry(tmp_path: Path) -> None:
    unreachable = f"http://127.0.0.1:{free_port()}/maven2"
    env = {"RLMESH_STREAM_CACHE": str(tmp_path / "cache"),
           "RLMESH_STREAM_MAVEN_REPO_LOCAL": str(tmp_path / "m2"),
           "RLMESH_STREAM_MAVEN_MIRROR": unreachable}
    result = _up(tmp_path / "home", env=env)
    message = _one_line_error(result)
    assert "could not fetch Kafka" in message and unreachable in message
    assert "rlmesh-stream infra fetch" in message


def test_fetch_without_maven_says_to_install_it(tmp_path: Path) -> None:
    with pytest.raises(ArtifactError, match=r"Maven .* is not installed; install it"):
        Artifacts(cache_dir=tmp_path, mvn="mvn-not-installed").ensure()

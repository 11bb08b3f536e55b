"""A secret inside a URL on the command line is never printed, however the URL is typed.

Every option that takes a URL (`--sink`, `--catalog`, `--registry-url`,
`--mlflow-tracking-uri`) is fed URLs holding a secret: in the user info (with an
unencoded `@`, `/` or an invalid percent escape in the password), in a query parameter
(`password`, `sslpassword`, `token`, a `*secret*` or `*key*` name), in a URL no parser
takes. The command fails as it must (nothing listens), through the real CLI, with one
`Error:` line on stderr, no traceback, and neither the secret nor any piece of it
(3 characters or more, between the separators a client splits a URL at) anywhere in
its output.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.conftest import StackEndpoints
from tests.loopback import closed_port

CLI = str(Path(sys.executable).parent / "rlmesh-stream")
TAG = uuid.uuid4().hex[:8]


PORT = closed_port()
PG = f"127.0.0.1:{PORT}"

# (id, the URL, its secret)
SINKS = [
    ("query password", f"postgresql://alice@{PG}/db?password=Qpw{TAG}", f"Qpw{TAG}"),
    ("query sslpassword", f"postgresql://alice@{PG}/db?sslmode=disable&sslpassword=Ssl{TAG}",
     f"Ssl{TAG}"),
    ("query *secret*", f"postgresql://alice@{PG}/db?client_secret=Cs{TAG}", f"Cs{TAG}"),
    ("query *key* percent-encoded", f"postgresql://alice@{PG}/db?api%5Fkey=Ak{TAG}",
     f"Ak{TAG}"),
    ("unencoded @ in the password", f"postgresql://alice:S3cr@tPW{TAG}@{PG}/db",
     f"S3cr@tPW{TAG}"),
    ("unencoded / in the password", f"postgresql://alice:Sl{TAG}/ash{TAG}@{PG}/db",
     f"Sl{TAG}/ash{TAG}"),
    ("invalid percent escape", f"postgresql://alice:Pc%zz{TAG}@{PG}/db", f"Pc%zz{TAG}"),
    ("unclosed IPv6 bracket", f"postgresql://alice:Br{TAG}@[::1/db", f"Br{TAG}"),
    ("port that is no number", f"postgresql://alice:Np{TAG}@127.0.0.1:x{TAG}/db",
     f"Np{TAG}"),
]


def _pieces(secret: str) -> list[str]:
    return [secret, *(p for p in re.split(r"[@/?#:&;%=]", secret) if len(p) >= 3)]


def _run(*args: str, tmp_path: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLMESH_STREAM_")}
    return subprocess.run([CLI, *args], capture_output=True, text=True, cwd=tmp_path,
                          env=env, timeout=timeout)


def _one_error_line_without(result: subprocess.CompletedProcess[str], secret: str) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode != 0, result.stdout
    assert "Traceback" not in result.stderr, result.stderr
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    for piece in _pieces(secret):
        assert piece not in result.stdout + result.stderr, (piece, lines[0])
    return lines[0]


@pytest.mark.stack
@pytest.mark.parametrize(("url", "secret"), [s[1:] for s in SINKS], ids=[s[0] for s in SINKS])
def test_a_sink_url_secret_is_never_printed(url: str, secret: str, stack: StackEndpoints,
                                            tmp_path: Path) -> None:
    # a Kafka that answers: `consume` reaches it while the sink opens (a down one is
    # warned about on stderr too)
    result = _run("consume", "all", "--sink", url, "--until-end", "--quiet",
                  "--bootstrap", stack.bootstrap, "--registry-url", stack.registry_url,
                  tmp_path=tmp_path)

    _one_error_line_without(result, secret)


@pytest.mark.parametrize("command", [
    ("report", "episodes"), ("join", "--log", "{log}")], ids=["report", "join"])
def test_report_and_join_hide_a_sink_url_secret_too(command: tuple[str, ...],
                                                     tmp_path: Path) -> None:
    log = tmp_path / "train.jsonl"
    log.write_text('{"step": 1, "time": "2026-03-01T12:00:00Z", "checkpoint": "c1"}\n')
    _, url, secret = SINKS[4]  # the unencoded @

    result = _run(*(a.format(log=log) for a in command), "--sink", url, tmp_path=tmp_path)

    assert "cannot connect to postgresql://alice:***@" in _one_error_line_without(
        result, secret)


@pytest.mark.parametrize(("url", "secret"), [s[1:] for s in SINKS[:5] + SINKS[6:7]],
                         ids=[s[0] for s in SINKS[:5] + SINKS[6:7]])
def test_an_iceberg_catalog_url_secret_is_never_printed(url: str, secret: str,
                                                         tmp_path: Path) -> None:
    result = _run("export", "trajectories", "--format", "iceberg", "--catalog", url,
                  "--table", "ns.t", "--warehouse", str(tmp_path / "wh"), "--from-beginning",
                  "--until-end", "--quiet", "--bootstrap", f"127.0.0.1:{PORT}",
                  "--connect-timeout", "1", tmp_path=tmp_path, timeout=90)

    _one_error_line_without(result, secret)


@pytest.mark.stack
@pytest.mark.parametrize("url", [
    f"http://127.0.0.1:{PORT}/apis/ccompat/v7?token=Rg@pw{TAG}",
    f"http://alice:Rg@pw{TAG}@127.0.0.1:{PORT}/apis/ccompat/v7",
], ids=["query token", "unencoded @"])
@pytest.mark.parametrize("command", [
    ("schemas", "register"), ("infra", "smoke", "--no-up", "--topic-prefix", f"sec{TAG}"),
], ids=["schemas register", "infra smoke"])
def test_a_registry_url_secret_is_never_printed(url: str, command: tuple[str, ...],
                                                stack: StackEndpoints, tmp_path: Path) -> None:
    result = _run(*command, "--registry-url", url, "--registry-timeout", "2",
                  "--bootstrap", stack.bootstrap, tmp_path=tmp_path)

    _one_error_line_without(result, f"Rg@pw{TAG}")


@pytest.mark.parametrize("uri", [
    f"postgresql://alice:Ml@pw{TAG}@127.0.0.1:{PORT}/mlflow",
    f"postgresql://alice@127.0.0.1:{PORT}/mlflow?password=Ml@pw{TAG}",
    f"http://alice:Ml@pw{TAG}@127.0.0.1:{PORT}",
], ids=["database, unencoded @", "database, query password", "server, unencoded @"])
def test_an_mlflow_tracking_uri_secret_is_never_printed(uri: str, tmp_path: Path) -> None:
    from rlmesh_stream.consumers.sinks import open_sink

    store = tmp_path / "store.duckdb"
    open_sink(f"duckdb://{store}").close()  # the tables, empty: the join reads MLflow next

    result = _run("join", "--sink", f"duckdb://{store}", "--mlflow-tracking-uri", uri,
                  "--mlflow-run", "0123456789abcdef", "--checkpoint-step", r"ckpt-(\d+)",
                  tmp_path=tmp_path, timeout=90)

    assert "MLflow tracking store" in _one_error_line_without(result, f"Ml@pw{TAG}")

"""Every bad `--sink` is one `Error:` line and a non-zero exit, for every command that takes one.

`consume`, `report` and `join` open their store through one module
(`rlmesh_stream.consumers.sinks.url`), so each bad URL below is fed to all three
through the root command, as a user types it. No stack is needed: a sink is opened
before Kafka is contacted, and a refused one must never be consumed into.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import click
import duckdb
import pytest
from click.testing import CliRunner, Result

from rlmesh_stream.consumers.sinks import open_sink
from rlmesh_stream.infra.cli import COMMANDS as COMMANDS_TABLE
from rlmesh_stream.infra.cli import main

# (id, how to make the URL in a fresh folder, what the error line must name)
BadSink = tuple[str, Callable[[Path], str], str]


def _store(path: Path) -> Path:
    duckdb.connect(str(path)).close()
    return path


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


BAD_SINKS: list[BadSink] = [
    ("a directory", lambda d: f"duckdb://{d}", "is a directory"),
    ("a text file", lambda d: f"duckdb://{_write(d / 'notes.duckdb', b'not a database ' * 40)}",
     "is not a DuckDB database file"),
    ("a 0-byte file", lambda d: f"duckdb://{_write(d / 'empty.duckdb', b'')}",
     "is an empty file"),
    ("a missing folder", lambda d: f"duckdb://{d / 'nowhere' / 'x.duckdb'}", "nowhere"),
    ("a closed PostgreSQL port", lambda d: "postgresql://alice:s3cret@127.0.0.1:1/rlmesh",
     "cannot connect to postgresql://alice:***@127.0.0.1:1/rlmesh"),
    ("mysql://", lambda d: "mysql://root@127.0.0.1/rlmesh", "mysql:// is not supported"),
    ("a bare path", lambda d: str(_store(d / "bare.duckdb")), "is not a URL"),
    ("duckdb:// with no path", lambda d: "duckdb://", "names no file"),
    ("duckdb://:memory:", lambda d: "duckdb://:memory:", "in-memory"),
]

COMMANDS: dict[str, Callable[[str, Path], list[str]]] = {
    "consume": lambda sink, d: ["consume", "all", "--sink", sink, "--until-end", "--quiet"],
    "report": lambda sink, d: ["report", "episodes", "--sink", sink],
    "join": lambda sink, d: ["join", "--sink", sink, "--log", str(_log(d))],
}


def _log(folder: Path) -> Path:
    log = folder / "train.jsonl"
    log.write_text('{"step": 1, "time": "2026-03-01T12:00:00Z", "checkpoint": "c1"}\n')
    return log


def run(args: list[str]) -> Result:
    # Kafka is never reached: nothing listens on port 1, and a refused sink stops first.
    env = {"RLMESH_STREAM_BOOTSTRAP": "127.0.0.1:1",
           "RLMESH_STREAM_REGISTRY_URL": "http://127.0.0.1:1"}
    return CliRunner().invoke(main, args, env=env)


def assert_one_error_line(result: Result, *fragments: str) -> str:
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"{result.exception!r} escaped as a traceback")
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0]
    return lines[0]


@pytest.fixture
def folder(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path
    subprocess.run(["chattr", "-R", "-i", str(tmp_path)], capture_output=True, check=False)


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize(("what", "make", "named"), BAD_SINKS, ids=[b[0] for b in BAD_SINKS])
def test_a_bad_sink_is_one_error_line(command: str, what: str, make: Callable[[Path], str],
                                      named: str, folder: Path) -> None:
    sink = make(folder)
    line = assert_one_error_line(run(COMMANDS[command](sink, folder)), named)
    assert "s3cret" not in line
    assert "writing process" not in line  # the lock hint only where a lock is the cause


def test_consume_into_a_bare_path_creates_nothing(folder: Path) -> None:
    target = folder / "new.duckdb"
    run(["consume", "all", "--sink", str(target)])
    assert not target.exists()


def test_consume_refuses_a_file_in_use_by_another_process_and_names_it(folder: Path) -> None:
    path = _store(folder / "busy.duckdb")
    holder = subprocess.Popen(
        [sys.executable, "-c", "import duckdb, sys; c = duckdb.connect(sys.argv[1]); "
         "print('ready', flush=True); sys.stdin.read()", str(path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        for args in (COMMANDS["consume"](f"duckdb://{path}", folder),
                     COMMANDS["report"](f"duckdb://{path}", folder)):
            assert_one_error_line(run(args), "in use by another process", f"PID {holder.pid}")
    finally:
        holder.communicate("", timeout=30)


@pytest.mark.skipif(shutil.which("chattr") is None, reason="needs chattr (e2fsprogs)")
def test_consume_refuses_an_immutable_store(folder: Path) -> None:
    path = _store(folder / "frozen.duckdb")
    if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode != 0:
        pytest.skip("this file system or user cannot set the immutable flag")
    assert_one_error_line(run(COMMANDS["consume"](f"duckdb://{path}", folder)),
                          "permission denied", str(path))


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write a read-only file")
def test_consume_refuses_a_read_only_store(folder: Path) -> None:
    path = _store(folder / "readonly.duckdb")
    path.chmod(0o444)
    assert_one_error_line(run(COMMANDS["consume"](f"duckdb://{path}", folder)),
                          "permission denied", str(path))


def test_consume_refuses_a_foreign_episodes_table_and_leaves_it_untouched(folder: Path) -> None:
    path = folder / "mine.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE episodes (id INTEGER, note TEXT)")
    con.execute("INSERT INTO episodes VALUES (1, 'my own data')")
    con.close()

    line = assert_one_error_line(run(COMMANDS["consume"](f"duckdb://{path}", folder)),
                                 "'episodes'", "did not create")
    assert "id, note" in line

    con = duckdb.connect(str(path), read_only=True)
    columns = [r[0] for r in con.execute("DESCRIBE episodes").fetchall()]
    rows = con.execute("SELECT * FROM episodes").fetchall()
    tables = {r[0] for r in con.execute(
        "SELECT table_name FROM information_schema.tables").fetchall()}
    con.close()
    assert columns == ["id", "note"]
    assert rows == [(1, "my own data")]
    assert tables == {"episodes"}  # and nothing of ours was created next to it


def test_consume_refuses_a_foreign_table_whose_name_differs_only_in_case(folder: Path) -> None:
    path = folder / "cased.duckdb"
    con = duckdb.connect(str(path))
    con.execute('CREATE TABLE "Episodes" (id INTEGER)')  # DuckDB: the same name as episodes
    con.close()
    assert_one_error_line(run(COMMANDS["consume"](f"duckdb://{path}", folder)), "'episodes'")
    con = duckdb.connect(str(path), read_only=True)
    assert [r[0] for r in con.execute('DESCRIBE "Episodes"').fetchall()] == ["id"]
    con.close()


def test_consume_refuses_a_table_where_the_consumers_keep_a_view(folder: Path) -> None:
    path = folder / "view.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE delivery_producers (producer_id TEXT)")
    con.close()
    assert_one_error_line(run(COMMANDS["consume"](f"duckdb://{path}", folder)),
                          "'delivery_producers'")


@pytest.mark.postgres
def test_consume_refuses_a_foreign_episodes_table_on_postgresql(postgres_dsn: str) -> None:
    import psycopg

    with psycopg.connect(postgres_dsn, autocommit=True) as con:
        con.execute("CREATE TABLE episodes (id INTEGER, note TEXT)")
        con.execute("INSERT INTO episodes VALUES (1, 'my own data')")
    assert_one_error_line(run(["consume", "all", "--sink", postgres_dsn, "--quiet"]),
                          "'episodes'", "did not create")
    with psycopg.connect(postgres_dsn) as con:
        columns = [r[0] for r in con.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'episodes' "
            "ORDER BY ordinal_position").fetchall()]
        assert columns == ["id", "note"]
        assert con.execute("SELECT * FROM episodes").fetchall() == [(1, "my own data")]


@click.command("probe")
@click.option("--sink")
def probe(sink: str) -> None:
    """A command that opens its sink and leaves a refusal to the root command."""
    open_sink(sink).close()


def test_the_root_command_turns_an_uncaught_sink_error_into_one_line(
        monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    monkeypatch.setitem(COMMANDS_TABLE, "probe", f"{__name__}:probe")
    assert_one_error_line(run(["probe", "--sink", "mysql://root@127.0.0.1/rlmesh"]),
                          "mysql:// is not supported")

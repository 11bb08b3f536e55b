"""Specification: every option of every command refuses a hostile value as the command line
is parsed, in one line naming the option; and no path a user types destroys a consumer's
state.

The sweep walks the whole CLI (every command under `rlmesh-stream`, every option) and
derives the hostile values from each option's type (`rlmesh_stream.schemas.cli_values`):
for text, an empty string, 5 000 characters, a NUL, a newline, bytes that are not UTF-8;
for a path, those and a file where a folder is meant (and the other way round), a missing
input, an output in a folder nobody may write, below a file, onto a DuckDB store or into
an exported dataset; for a number, each side of its range, NaN, infinity and no number at
all. Parsing runs in this process (`Command.make_context`: types and callbacks, nothing
invoked), so the ~1 200 cases take seconds and need no server: what they show is that the
value is refused before anything is read, written or connected to.

A second table runs the real command line for what only a process shows (argv bytes that
are not UTF-8, the exit status, stderr being one line, the files left as they were), and
the checks made when a command opens its destination. The last test runs the longest
names the options accept against the real Kafka.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import duckdb
import pytest

from rlmesh_stream.consumers.sinks import open_sink
from rlmesh_stream.consumers.sinks.url import SinkURLType
from rlmesh_stream.schemas.cli_values import STATE_DIR, FiniteFloatRange, PathValue, Text
from rlmesh_stream.schemas.connection.cli_options import SharedOption
from tests.cli.cli_run import run_cli
from tests.cli.command_tree import command_lines

# What each command line needs besides the option under test, to parse at all.
REQUIRED: dict[str, list[str]] = {
    "export certificate": ["."],
    "export trajectories": ["--format", "parquet"],
    "schemas sql": ["--engine", "flink"],
    "tail": ["log"],
}

# (command line, option, value kind) whose value is a valid one for that option.
VALID: set[tuple[str, str, str]] = {
    ("join", "--metric", "empty"),  # '' is "no metric column"
    ("export trajectories", "--description", "newline"),  # Minari's text may have lines
}


COMMAND_LINES = command_lines()


def _options(command: click.Command) -> list[click.Option]:
    return [p for p in command.params if isinstance(p, click.Option)
            and not p.is_flag and not p.count and p.name not in ("help", "version")]


@dataclass(frozen=True)
class Hostile:
    line: str
    option: str  # the flag, e.g. --group
    kind: str  # what is wrong with the value, e.g. "nul"
    value: str  # may name a fixture path: {file}, {dir}, {store}, {dataset}, {unwritable}
    secret: bool = False


def _number_values(kind: click.ParamType) -> Iterator[tuple[str, str]]:
    assert isinstance(kind, (click.IntRange, click.FloatRange)), kind
    low, high = kind.min, kind.max
    if low is not None:
        yield "below the range", str(low if kind.min_open else low - 1)
    if high is not None:
        yield "above the range", str(high if kind.max_open else high * 10 + 1)
    if isinstance(kind, click.FloatRange):
        yield "nan", "nan"
        yield "infinity", "inf"
    yield "empty", ""
    yield "no number", "1e999999x"


def _text_values(kind: Text | PathValue) -> Iterator[tuple[str, str]]:
    limit = kind.max_chars if isinstance(kind, Text) else 4095
    if not (isinstance(kind, Text) and kind.allow_empty):
        yield "empty", ""
    yield "too long", "x" * max(5000, limit + 1)
    yield "nul", "a\x00b"
    yield "newline", "a\nb"
    yield "not utf-8", "a\udcff\udcfeb"  # how Python hands on argv bytes b"\xff\xfe"


def _path_values(kind: PathValue) -> Iterator[tuple[str, str]]:
    yield from _text_values(kind)
    yield "a name longer than a file system allows", "d/" + "n" * 256
    if not kind.file_okay:
        yield "a file for a folder", "{file}"
    if not kind.dir_okay:
        yield "a folder for a file", "{dir}"
    if kind.exists:
        yield "missing", "{dir}/missing"
    if kind.output:
        yield "under a file", "{file}/below"
        yield "in a folder nobody may write", "{unwritable}/x"
        yield "in an export's state directory", "{dataset}/" + STATE_DIR + "/x"
        yield "inside an exported dataset", "{dataset}/steps/x"
        if kind.file_okay:
            yield "onto a DuckDB store", "{store}"


def _values(option: click.Option) -> Iterator[tuple[str, str]]:
    kind = option.type
    if isinstance(kind, PathValue):
        yield from _path_values(kind)
    elif isinstance(kind, Text):
        yield from _text_values(kind)
    elif isinstance(kind, (click.IntRange, click.FloatRange)):
        yield from _number_values(kind)
    elif isinstance(kind, click.Choice):
        yield "not a choice", "bogus\udcff"
    elif isinstance(kind, SinkURLType):
        yield "empty", ""
        yield "nul", "duckdb:///tmp/a\x00b.duckdb"
        yield "not utf-8", "duckdb:///tmp/\udcff.duckdb"
        yield "a name longer than a file system allows", "duckdb:///tmp/" + "n" * 256
        yield "not a URL", "rlmesh.duckdb"


def _cases() -> Iterator[Any]:
    shared_seen: set[str] = set()
    for line, command in sorted(COMMAND_LINES.items()):
        for option in _options(command):
            flag = max(option.opts, key=len)
            if isinstance(option, SharedOption):  # declared once for all: swept once
                if flag in shared_seen:
                    continue
                shared_seen.add(flag)
            secret = isinstance(option.type, Text) and option.type.secret
            for kind, value in _values(option):
                if (line, flag, kind) in VALID:
                    continue
                case = Hostile(line, flag, kind, value, secret)
                yield pytest.param(case, id=f"{line} {flag} {kind}")


def _make_places(tmp_path: Path) -> dict[str, str]:
    """What `{name}` in a value stands for: a file, a folder, a DuckDB store, an exported
    dataset (a folder holding the exporter's state), a folder nobody may write."""
    (tmp_path / "file").write_text("x")
    (tmp_path / "dir").mkdir()
    (tmp_path / "dataset" / STATE_DIR).mkdir(parents=True)
    (tmp_path / "dataset" / STATE_DIR / "manifest.json").write_text('{"generation": 3}')
    (tmp_path / "dataset" / "steps").mkdir()
    open_sink(f"duckdb://{tmp_path / 'store.duckdb'}").close()
    unwritable = tmp_path / "read-only"
    unwritable.mkdir(mode=0o555)
    return {"file": str(tmp_path / "file"), "dir": str(tmp_path / "dir"),
            "dataset": str(tmp_path / "dataset"), "store": str(tmp_path / "store.duckdb"),
            "manifest": str(tmp_path / "dataset" / STATE_DIR / "manifest.json"),
            # as root, permissions do not stop this process: sysfs refuses new files
            "unwritable": "/sys" if os.geteuid() == 0 else str(unwritable)}


@pytest.fixture(scope="module")
def places(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return _make_places(tmp_path_factory.mktemp("places"))


@pytest.fixture(autouse=True)
def _no_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("RLMESH_STREAM_") or name == "MLFLOW_TRACKING_URI":
            monkeypatch.delenv(name)


def _parse(line: str, args: list[str]) -> click.Context:
    command = COMMAND_LINES[line]
    return command.make_context(line, [*REQUIRED.get(line, []), *args])


@pytest.mark.parametrize("line", sorted(COMMAND_LINES))
def test_each_command_line_parses_with_only_what_the_sweep_adds(line: str) -> None:
    """The sweep's base command lines are complete: an error it sees is the option's."""
    _parse(line, [])


@pytest.mark.parametrize("case", list(_cases()))
def test_a_hostile_value_is_refused_in_one_line_naming_the_option(
    case: Hostile, places: dict[str, str],
) -> None:
    value = case.value.format_map(places) if "{" in case.value else case.value
    with pytest.raises(click.ClickException) as refused:
        _parse(case.line, [case.option, value])

    message = refused.value.format_message()
    assert "\n" not in message, message
    named = case.option if isinstance(refused.value, click.BadParameter) else (
        case.option.lstrip("-"))
    assert named in message, message
    if case.secret and value:
        assert value not in message and repr(value)[1:-1] not in message, message
    if isinstance(refused.value, click.BadParameter):
        assert refused.value.param is not None
        assert case.option in refused.value.param.opts


def test_every_option_takes_a_type_that_checks_its_value() -> None:
    """Text, paths and numbers go through `cli_values`' types (or a Choice, a flag, the
    sink's URL type), and every number has both ends of a range or must be finite."""
    unchecked = []
    for line, command in COMMAND_LINES.items():
        for option in _options(command):
            kind = option.type
            bounded = (isinstance(kind, (click.IntRange, click.FloatRange))
                       and kind.min is not None and kind.max is not None)
            finite = isinstance(kind, FiniteFloatRange)
            if not (isinstance(kind, (Text, PathValue, click.Choice, SinkURLType))
                    or bounded or (finite and (kind.min is None or kind.max is not None))):
                unchecked.append(f"{line} {option.opts[0]}: {kind!r}")
    assert unchecked == []


def test_a_secret_options_value_is_never_quoted(places: dict[str, str]) -> None:
    with pytest.raises(click.BadParameter) as refused:
        _parse("consume all", ["--sasl-password", "S3cr\nt-PW"])
    assert "S3cr" not in refused.value.format_message()


# -- the real command line ---------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    name: str
    args: tuple[str | bytes, ...]
    words: tuple[str, ...]  # each in the one error line (case-insensitive)
    exit_status: int = 2  # 2: refused as the line was parsed; 1: when the command started
    kept: tuple[str, ...] = ()  # fixture files whose bytes must be left as they were


CLOSED = ("--bootstrap", "127.0.0.1:{closed_port}")
PARQUET = ("export", "trajectories", "--format", "parquet")

ROWS: list[Row] = [
    Row("argv bytes that are not UTF-8",
        (*PARQUET, "--out", "{tmp_path}/ds", "--group", b"ab\xff\xfe"),
        ("--group", "not valid UTF-8")),
    Row("empty bootstrap servers", ("consume", "all", "--bootstrap", ""),
        ("--bootstrap", "empty")),
    Row("a bootstrap server's port out of range", ("consume", "all", "--bootstrap", "h:99999"),
        ("--bootstrap", "port 99999")),
    Row("a 5 000-character dataset id",
        ("export", "trajectories", "--format", "minari", "--out", "{tmp_path}/ds",
         "--dataset-id", "a" * 4990 + "-v0"),
        ("--dataset-id", "4993 characters long")),
    Row("a telemetry window no clock holds", ("consume", "telemetry", "--window", "1e20"),
        ("--window", "1e+20")),
    Row("a NaN Flink window", ("schemas", "sql", "--engine", "flink", "--window", "nan"),
        ("--window", "nan")),
    Row("a report onto the store it reads",
        ("report", "delivery", "--sink", "duckdb://{store}", "--output", "{store}"),
        ("--output", "DuckDB store"), kept=("store",)),
    Row("an export into another export's state directory",
        (*PARQUET, "--out", "{dataset}/" + STATE_DIR), ("--out", STATE_DIR),
        kept=("manifest",)),
    Row("an export inside another exported dataset", (*PARQUET, "--out", "{dataset}/steps"),
        ("--out", "inside the exported dataset"), kept=("manifest",)),
    Row("an export below a file", (*PARQUET, "--out", "{file}/ds"), ("--out", "is a file")),
    Row("a store inside an export's state directory",
        ("consume", "all", "--until-end", "--quiet", *CLOSED,
         "--sink", "duckdb://{dataset}/" + STATE_DIR + "/s.duckdb"),
        ("state directory",), exit_status=1, kept=("manifest",)),
    Row("a sink path no file system takes",
        ("report", "episodes", "--sink", "duckdb:///tmp/" + "n" * 300 + ".duckdb"),
        ("sink", "307 bytes"), exit_status=1),  # a --sink is refused as a store is: 1
    Row("a join's export onto the store",
        ("join", "--sink", "duckdb://{store}", "--log", "{file}", "--export", "{store}"),
        ("--export", "DuckDB store"), kept=("store",)),
    Row("a simulator manifest nobody may write (refused before publishing)",
        ("simulate", *CLOSED, "--manifest", "{unwritable}/m.json"),
        ("--manifest", "cannot be written")),
    Row("a negative number of log lines", ("infra", "logs", "--lines", "-1"), ("--lines", "-1")),
    Row("a static member id holding a tab", ("consume", "all", "--instance-id", "a\tb"),
        ("--instance-id", "control character")),
    Row("a SASL mechanism librdkafka does not know",
        ("consume", "all", "--sasl-mechanism", ""), ("--sasl-mechanism",)),
    Row("a session filter that is not UTF-8", ("tail", "log", "--session", b"\xff"),
        ("--session", "UTF-8")),
    Row("a demo into a folder of the user's files",
        ("demo", "--no-start-stack", *CLOSED, "--out", "{dir}"),
        ("--out", "did not write"), exit_status=1, kept=("user_file",)),
]


@pytest.fixture
def row_places(tmp_path: Path, closed_port: int) -> dict[str, Any]:
    places = _make_places(tmp_path)
    (tmp_path / "dir" / "notes.txt").write_text("the user's")
    return {**places, "tmp_path": str(tmp_path), "closed_port": closed_port,
            "user_file": str(tmp_path / "dir" / "notes.txt")}


def _format(arg: str | bytes, names: dict[str, Any]) -> str | bytes:
    return arg.format_map(names) if isinstance(arg, str) and "{" in arg else arg


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_the_command_line_ends_with_one_error_line_and_leaves_state_alone(
    row: Row, row_places: dict[str, Any], tmp_path: Path,
) -> None:
    before = {name: Path(row_places[name]).read_bytes() for name in row.kept}

    result = run_cli([_format(a, row_places) for a in row.args], cwd=tmp_path, timeout=60)

    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert "Traceback" not in result.stderr, result.stderr
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: "), lines[0]
    assert result.returncode == row.exit_status, result.stderr
    for word in row.words:
        assert word.lower() in lines[0].lower(), (word, lines[0])
    assert {name: Path(row_places[name]).read_bytes() for name in row.kept} == before


def test_an_export_into_a_folder_of_foreign_parquet_files_is_refused_and_deletes_none(
    tmp_path: Path, bootstrap: str, fresh_prefix: str,
) -> None:
    """A Parquet dataset copied without its state (or a folder laid out like one) is not
    this export's: a first run would have taken its data files for a crashed commit's."""
    part = tmp_path / "copy" / "steps" / "env=CartPole-v1" / "part-000003_0.parquet"
    part.parent.mkdir(parents=True)
    part.write_bytes(b"PAR1 someone else's rows PAR1")

    result = run_cli([*PARQUET, "--out", str(tmp_path / "copy"), "--until-end", "--quiet",
                      "--bootstrap", bootstrap, "--topic-prefix", fresh_prefix],
                     cwd=tmp_path, timeout=60)

    assert result.returncode == 1, result.stderr
    assert result.stderr.startswith("Error: ") and "holds Parquet files" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert part.read_bytes() == b"PAR1 someone else's rows PAR1"
    assert not (tmp_path / "copy" / STATE_DIR).exists()


def test_the_longest_group_and_instance_ids_accepted_work_against_kafka(
    tmp_path: Path, bootstrap: str, registry: str, published_prefix: str,
) -> None:
    """The limits are not tighter than Kafka's: a 1 000-character group and static member
    id (the longest text the options take) consume the topics to their end."""
    result = run_cli(["consume", "sessions", "--until-end", "--from-beginning", "--quiet",
                      "--sink", f"duckdb://{tmp_path / 's.duckdb'}", "--bootstrap", bootstrap,
                      "--registry-url", registry, "--topic-prefix", published_prefix,
                      "--group", "g" * 1000,
                      "--instance-id", "i" * 1000],
                     cwd=tmp_path, timeout=120)

    assert result.returncode == 0, result.stderr
    con = duckdb.connect(str(tmp_path / "s.duckdb"), read_only=True)
    try:
        assert con.execute("SELECT count(*) FROM sessions").fetchone() == (1,)
    finally:
        con.close()


"""The CLI bad-input table: every command fed bad input ends at once with one `Error:` line.

Each row is a command line, the words its one error line must contain, and how long it may
take. `{name}` in a row's arguments is the value of the fixture `name` (tests/cli/conftest.py
and tests/conftest.py): a row names the servers, stores and files it needs and nothing else
is started. To add a row, append a `BadInput` to `CASES` (add a fixture for a new
placeholder).

Asserted for every row: a non-zero exit, exactly one non-empty line on stderr, starting
with `Error:` and naming what was wrong, no traceback, and an end within the row's timeout.
"""

from __future__ import annotations

import string
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.cli.cli_run import run_cli


@dataclass(frozen=True)
class BadInput:
    name: str
    args: tuple[str, ...]
    words: tuple[str, ...]  # each must appear in the error line (case-insensitive)
    timeout: float = 20.0  # seconds the command may take


SINK = "--sink=duckdb://{tmp_path}/store.duckdb"
MLFLOW_RUN = ("--mlflow-run", "0123456789abcdef", "--checkpoint-step", r"ckpt-(\d+)")
OFFLINE = ("--until-end", "--quiet", SINK, "--bootstrap", "127.0.0.1:{closed_port}")

CASES: list[BadInput] = [
    # -- consume: options checked when the command line is parsed
    BadInput("consume --window negative", ("consume", "telemetry", "--window", "-5"),
             ("--window", "-5")),
    BadInput("consume all --window 0", ("consume", "all", "--window", "0"), ("--window", "0")),
    BadInput("consume --max-batch 0", ("consume", "episodes", "--max-batch", "0"),
             ("--max-batch",)),
    BadInput("consume --dlq-topic illegal", ("consume", "episodes", "--dlq-topic", "bad name!!"),
             ("--dlq-topic", "bad name!!")),
    BadInput("consume --dlq-topic an event topic (dead letters would loop)",
             ("consume", "episodes", "--dlq-topic", "rlmesh.runtime.episode_completed"),
             ("--dlq-topic", "rlmesh.runtime.episode_completed", "event topic")),
    BadInput("export --dlq-topic an event topic (dead letters would loop)",
             ("export", "trajectories", "--out", "{tmp_path}/ds", "--format", "parquet",
              "--dlq-topic", "rlmesh.runtime.step_completed"),
             ("--dlq-topic", "rlmesh.runtime.step_completed", "event topic")),
    BadInput("consume --security-protocol BOGUS",
             ("consume", "episodes", "--security-protocol", "BOGUS"),
             ("--security-protocol", "BOGUS")),
    # -- connection options every command shares
    BadInput("registry URL without a scheme",
             ("schemas", "register", "--registry-url", "127.0.0.1:8081"),
             ("--registry-url", "http")),
    BadInput("topic prefix Kafka cannot name topics with",
             ("topics", "create", "--topic-prefix", "bad/prefix"), ("--topic-prefix", "'/'")),
    # -- topics create
    BadInput("topics create --partitions 0", ("topics", "create", "--partitions", "0"),
             ("--partitions",)),
    BadInput("topics create --partitions -3", ("topics", "create", "--partitions", "-3"),
             ("--partitions", "-3")),
    BadInput("topics create --retention-ms -5", ("topics", "create", "--retention-ms", "-5"),
             ("--retention-ms", "-5")),
    BadInput("topics create --max-message-bytes 0",
             ("topics", "create", "--max-message-bytes", "0"), ("--max-message-bytes",)),
    BadInput("topics create --replication-factor above the brokers",
             ("topics", "create", "--bootstrap", "{bootstrap}", "--topic-prefix",
              "{fresh_prefix}", "--replication-factor", "5"),
             ("replication factor 5", "brokers")),
    BadInput("topics create with a protocol the broker does not speak",
             ("topics", "create", "--bootstrap", "{bootstrap}", "--topic-prefix",
              "{fresh_prefix}", "--security-protocol", "SSL"),
             ("cannot reach Kafka", "PLAINTEXT"), timeout=60),
    # -- other commands' options
    BadInput("infra up --kafka-port 99999", ("infra", "up", "--kafka-port", "99999"),
             ("--kafka-port", "99999")),
    BadInput("simulate --sessions -1", ("simulate", "--sessions", "-1"), ("--sessions", "-1")),
    # -- numbers no range check sees through (NaN, infinity) and sizes nothing can hold;
    #    Kafka is unreachable in these rows, so a command that accepted one would fail later
    #    naming Kafka, not the option
    BadInput("consume --checkpoint-interval nan",
             ("consume", "episodes", "--checkpoint-interval", "nan", *OFFLINE),
             ("--checkpoint-interval", "nan")),
    BadInput("consume --checkpoint-interval inf",
             ("consume", "episodes", "--checkpoint-interval", "inf", *OFFLINE),
             ("--checkpoint-interval", "inf")),
    BadInput("consume --settle-time nan",
             ("consume", "episodes", "--settle-time", "nan", *OFFLINE), ("--settle-time", "nan")),
    BadInput("consume --registry-timeout nan",
             ("consume", "episodes", "--registry-timeout", "nan", *OFFLINE),
             ("--registry-timeout", "nan")),
    BadInput("schemas register --registry-timeout inf",
             ("schemas", "register", "--registry-timeout", "inf", "--registry-url",
              "http://127.0.0.1:{closed_port}/apis/ccompat/v7"),
             ("--registry-timeout", "inf")),
    BadInput("consume --max-batch above any memory",
             ("consume", "episodes", "--max-batch", "99999999999999999999", *OFFLINE),
             ("--max-batch", "99999999999999999999")),
    BadInput("export --checkpoint-interval 0",
             ("export", "trajectories", "--out", "{tmp_path}/dataset", "--format", "parquet",
              "--checkpoint-interval", "0", "--until-end", "--quiet",
              "--bootstrap", "127.0.0.1:{closed_port}"),
             ("--checkpoint-interval", "0")),
    BadInput("export --until-end with Kafka unreachable",
             ("export", "trajectories", "--out", "{tmp_path}/dataset", "--format", "parquet",
              "--until-end", "--quiet", "--bootstrap", "127.0.0.1:{closed_port}",
              "--connect-timeout", "1"),
             ("cannot reach Kafka", "within 1 s", "--bootstrap"), timeout=40),
    BadInput("simulate --sessions 0",
             ("simulate", "--sessions", "0", "--bootstrap", "127.0.0.1:{closed_port}",
              "--flush-timeout", "1"),
             ("--sessions", "0")),
    BadInput("simulate --rate nan",
             ("simulate", "--rate", "nan", "--bootstrap", "127.0.0.1:{closed_port}",
              "--flush-timeout", "1"),
             ("--rate", "nan")),
    BadInput("topics create --partitions above librdkafka's limit",
             ("topics", "create", "--partitions", "100000000",
              "--bootstrap", "127.0.0.1:{closed_port}"),
             ("--partitions", "100000000")),
    # -- consume --until-end that could never end
    BadInput("consume --until-end with a prefix no topic has",
             ("consume", "episodes", "--until-end", "--quiet", SINK, "--bootstrap",
              "{bootstrap}", "--topic-prefix", "{fresh_prefix}"),
             ("none of the", "--topic-prefix")),
    BadInput("consume --until-end with Kafka unreachable",
             ("consume", "episodes", "--until-end", "--quiet", SINK,
              "--bootstrap", "127.0.0.1:{closed_port}", "--connect-timeout", "1"),
             ("cannot reach Kafka", "within 1 s", "--bootstrap"), timeout=40),
    BadInput("consume with SASL against a listener that speaks none",
             ("consume", "episodes", "--until-end", "--quiet", SINK, "--bootstrap",
              "{bootstrap}", "--security-protocol", "SASL_PLAINTEXT", "--sasl-mechanism",
              "PLAIN", "--sasl-username", "u", "--sasl-password", "p"),
             ("offers no SASL mechanism", "--security-protocol"), timeout=40),
    # -- tail
    BadInput("tail with a prefix no topic has",
             ("tail", "log", "-e", "--bootstrap", "{bootstrap}", "--topic-prefix",
              "{fresh_prefix}"),
             ("does not exist", "--topic-prefix")),
    BadInput("tail with Kafka unreachable",
             ("tail", "log", "-e", "--bootstrap", "127.0.0.1:{closed_port}",
              "--connect-timeout", "1"), ("Kafka",),
             timeout=40),
    BadInput("tail with a protocol the broker does not speak",
             ("tail", "log", "-e", "--bootstrap", "{bootstrap}", "--security-protocol", "SSL"),
             ("Kafka", "PLAINTEXT broker listener"), timeout=30),
    # -- a registry that hangs: bounded by --registry-timeout, not by 4 of them and more
    BadInput("schemas register against a hung registry",
             ("schemas", "register", "--registry-url", "{hung_registry}",
              "--registry-timeout", "3"),
             ("unreachable", "timed out"), timeout=12),
    BadInput("tail against a hung registry",
             ("tail", "session_started", "--from-beginning", "-e", "--bootstrap", "{bootstrap}",
              "--topic-prefix", "{published_prefix}", "--registry-url", "{hung_registry}",
              "--registry-timeout", "3"),
             ("schema registry", "timed out"), timeout=15),
    # -- a registry URL that leads to something else
    BadInput("schemas register against an HTML page",
             ("schemas", "register", "--registry-url", "{html_registry}"),
             ("JSON", "--registry-url")),
    BadInput("schemas check against an HTML page",
             ("schemas", "check", "--registry-url", "{html_registry}"),
             ("JSON", "--registry-url")),
    BadInput("tail against an HTML page",
             ("tail", "session_started", "--from-beginning", "-e", "--bootstrap", "{bootstrap}",
              "--topic-prefix", "{published_prefix}", "--registry-url", "{html_registry}"),
             ("JSON", "--registry-url")),
    BadInput("consume against an HTML page",
             ("consume", "sessions", "--until-end", "--from-beginning", "--quiet", SINK,
              "--bootstrap", "{bootstrap}", "--topic-prefix", "{published_prefix}",
              "--registry-url", "{html_registry}"),
             ("JSON", "--registry-url")),
    BadInput("schemas register at a path with no registry API",
             ("schemas", "register", "--registry-url", "{registry_root}/wrong/path"),
             ("HTTP 404", "path of --registry-url")),
    BadInput("infra smoke --no-up with the registry down",
             ("infra", "smoke", "--no-up", "--bootstrap", "{bootstrap}", "--topic-prefix",
              "{fresh_prefix}", "--registry-url",
              "http://127.0.0.1:{closed_port}/apis/ccompat/v7"),
             ("schema registry", "unreachable")),
    # -- analysis
    BadInput("report on an episodes table of another shape",
             ("report", "episodes", "--sink", "duckdb://{wrong_store}"),
             ("shape", "env_id")),
    BadInput("report --output into a missing folder",
             ("report", "delivery", "--sink", "duckdb://{empty_store}", "--output",
              "{tmp_path}/missing/report.txt"),
             ("--output", "does not exist")),
    BadInput("report --output into a folder that cannot be written",
             ("report", "delivery", "--sink", "duckdb://{empty_store}", "--output",
              "{unwritable_dir}/report.txt"),
             ("permission denied",)),
    BadInput("join --by asof with a NaN time",
             ("join", "--by", "asof", "--sink", "duckdb://{empty_store}", "--log", "{nan_log}"),
             ("not finite", "line 2")),
    BadInput("join --mlflow-tracking-uri sqlite:/// naming a file that is no database",
             ("join", "--sink", "duckdb://{empty_store}", *MLFLOW_RUN,
              "--mlflow-tracking-uri", "sqlite:///{not_a_database}"),
             ("mlflow.db", "not an SQLite database")),
    BadInput("join --mlflow-tracking-uri sqlite:/// at a mistyped path",
             ("join", "--sink", "duckdb://{empty_store}", *MLFLOW_RUN,
              "--mlflow-tracking-uri", "sqlite:///{tmp_path}/mlfow/mlflow.db"),
             ("mlfow/mlflow.db", "does not exist")),
    BadInput("join --log with malformed JSONL",
             ("join", "--sink", "duckdb://{empty_store}", "--log", "{malformed_jsonl}"),
             ("broken.jsonl", "Malformed JSON")),
    BadInput("join --log with a .parquet file that is not Parquet",
             ("join", "--sink", "duckdb://{empty_store}", "--log", "{not_parquet}"),
             ("train.parquet", "as parquet")),
    BadInput("join --log with an event record claiming 2^40 bytes",
             ("join", "--sink", "duckdb://{empty_store}", "--log", "{event_claiming_2_40}",
              "--checkpoint-step", r"ckpt-(\d+)"),
             ("events.out.tfevents.1099511627776", "corrupt", "claims 1099511627776 bytes")),
    BadInput("join --log with an event record claiming 2^64-1 bytes",
             ("join", "--sink", "duckdb://{empty_store}", "--log", "{event_claiming_2_64}",
              "--checkpoint-step", r"ckpt-(\d+)"),
             ("events.out.tfevents.18446744073709551615", "corrupt",
              "claims 18446744073709551615 bytes")),
    # -- export trajectories: a dataset id cannot leave --out
    BadInput("export --dataset-id escaping --out",
             ("export", "trajectories", "--out", "{tmp_path}/ds", "--format", "minari",
              "--dataset-id", "../../elsewhere/x-v0"),
             ("dataset id", "../../elsewhere/x-v0", "[NAMESPACE/]NAME-vN")),
    BadInput("export --max-episode-steps 0",
             ("export", "trajectories", "--out", "{tmp_path}/ds", "--format", "minari",
              "--max-episode-steps", "0"),
             ("--max-episode-steps", "0")),
    BadInput("export --minari-format bogus",
             ("export", "trajectories", "--out", "{tmp_path}/ds", "--format", "minari",
              "--minari-format", "bogus"),
             ("--minari-format", "bogus")),
]


class _Fixtures(dict[str, Any]):
    """`{name}` -> the fixture `name`'s value, requested only when a row uses it."""

    def __init__(self, request: pytest.FixtureRequest) -> None:
        super().__init__()
        self.request = request

    def __missing__(self, name: str) -> Any:
        self[name] = value = self.request.getfixturevalue(name)
        return value


# The placeholders whose fixtures reach the test stack (tests/cli/conftest.py): a row using
# one is marked `stack`, so `make check` (-m "not stack") leaves it out.
STACK_PLACEHOLDERS = frozenset({"bootstrap", "registry", "registry_root", "fresh_prefix",
                                "published_prefix"})


def _param(case: BadInput) -> Any:
    names = {field for arg in case.args for _, field, _, _ in string.Formatter().parse(arg)
             if field}
    marks = [pytest.mark.stack] if names & STACK_PLACEHOLDERS else []
    return pytest.param(case, id=case.name, marks=marks)


@pytest.mark.parametrize("case", [_param(c) for c in CASES])
def test_bad_input_ends_with_one_error_line(case: BadInput, request: pytest.FixtureRequest,
                                            tmp_path: Path) -> None:
    fixtures = _Fixtures(request)
    args = [a.format_map(fixtures) for a in case.args]
    assert "stack" not in request.fixturenames or request.node.get_closest_marker("stack"), (
        "this row's placeholders start the stack: add them to STACK_PLACEHOLDERS")
    started = time.monotonic()
    result = run_cli(args, cwd=tmp_path, timeout=case.timeout + 10)
    took = time.monotonic() - started

    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode != 0, result.stdout
    assert "Traceback" not in result.stderr, result.stderr
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: "), lines[0]
    for word in case.words:
        assert word.lower() in lines[0].lower(), (word, lines[0])
    assert took < case.timeout, f"took {took:.1f} s"

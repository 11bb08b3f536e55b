"""The settings reference (`docs/settings.md`), generated from the code that reads them.

    python -m rlmesh_stream.infra.settings_doc            # rewrite docs/settings.md
    python -m rlmesh_stream.infra.settings_doc --check    # exit 1 if the file is not current

Derived, not copied: the connection settings are `StreamConfig`'s fields (their variable,
default and the help of the option each one sets, `schemas.connection.cli_options`); the
hook's are the `ProducerSettings` fields `from_env` reads (their default and the comment
beside the field). The variables that are not a field of either (a command's option, the
stack's, the tests') are listed in `OTHER`, each with the module that reads it; a test
checks that every `RLMESH_STREAM_*` name in the sources is on the page.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import sys
from pathlib import Path
from typing import Any

from rlmesh_stream.producer.config import _PARSERS, ProducerSettings
from rlmesh_stream.schemas.connection.cli_options import _OPTIONS
from rlmesh_stream.schemas.connection.config import ENV_PREFIX, StreamConfig

DOC = Path(__file__).resolve().parents[1] / "docs" / "settings.md"

# Variables read outside the two settings classes: name -> (who reads it, what it does).
OTHER: dict[str, tuple[str, str]] = {
    "RLMESH_STREAM_TRACEBACK": (
        "`infra/cli.py`", "Any value: a command that fails shows the traceback behind its "
        "one-line `Error:` (off by default: one line, URL passwords redacted)."),
    "RLMESH_STREAM_SINK": (
        "`--sink` (`consumers/sinks/url.py`)", "The store the consumers write and the reports "
        "read: a DuckDB path or a `postgresql://` URL (default `rlmesh.duckdb`)."),
    "RLMESH_STREAM_METRICS_PORT": (
        "`consume --metrics-port`", "Serve the consumer's Prometheus metrics on this port "
        "(off by default)."),
    "RLMESH_STREAM_METRICS_ADDR": (
        "`producer/metrics.py`, `consumers/metrics.py`", "The address the metrics endpoints "
        "bind to (default `0.0.0.0`: all interfaces)."),
    "RLMESH_STREAM_HOME": (
        "`infra --home` (`infra/stack.py`)", "The local stack's directory (data, logs, "
        "ports of the last run)."),
    "RLMESH_STREAM_KAFKA_PORT": ("`infra up --kafka-port`", "The local stack's Kafka port "
                                 "(default 9092, or the previous run's)."),
    "RLMESH_STREAM_REGISTRY_PORT": ("`infra up --registry-port`", "The local stack's "
                                    "registry port (default 8081, or the previous run's)."),
    "RLMESH_STREAM_BROKERS": ("`infra up --brokers`", "How many Kafka brokers the local "
                              "stack runs."),
    "RLMESH_STREAM_CACHE": ("`infra/artifacts.py`", "Where Kafka, the registry and Flink's "
                            "jars are cached (default `~/.cache/rlmesh-stream`)."),
    "RLMESH_STREAM_MAVEN_MIRROR": ("`infra/artifacts.py`", "A Maven repository to fetch the "
                                   "stack's artifacts from instead of Maven Central."),
    "RLMESH_STREAM_MAVEN_REPO_LOCAL": ("`infra/artifacts.py`", "Maven's local repository for "
                                       "those fetches."),
    "RLMESH_STREAM_JAVA_HOME": ("`infra/java.py`", "The only JDK the stack may use (otherwise "
                                "`JAVA_HOME`, then `java` on the PATH)."),
    "RLMESH_STREAM_STACK": ("tests (`tests/conftest.py`)", "`docker`: the tests' stack from "
                            "testcontainers instead of a local one."),
    "RLMESH_STREAM_TEST_POSTGRES_DSN": ("tests (`tests/conftest.py`)", "An existing "
                                        "PostgreSQL server for the tests instead of a "
                                        "throwaway one."),
    "RLMESH_STREAM_CI_ARTIFACTS": ("tests (`tests/conftest.py`), `.ci/run`", "Where a test "
                                   "run with failures copies the stack's logs."),
    "RLMESH_STREAM_SPARK_PYTHON": ("tests (`tests/engines`), `.ci/run`", "The Python with "
                                   "PySpark 4.0 that the Spark test runs."),
    "RLMESH_STREAM_FAULT_REGISTRY_OUTAGE_S": ("tests (`tests/faults`)", "Seconds the "
                                              "registry outage scenario keeps it down "
                                              "(default 60)."),
    "RLMESH_STREAM_FUZZ_EXAMPLES": ("tests (`tests/fuzz`)", "Examples per decoder fuzz test "
                                    "(default 400)."),
    "RLMESH_STREAM_KAFKA_LIBS": ("tests (`tests/producer`)", "Kafka's `libs/` directory for "
                                 "the producer tests' Java tools (default: the cached one)."),
    "RLMESH_STREAM_MLFLOW_SERVER": ("tests (`tests/analysis/tool_servers.py`), `.ci/run`",
                                    "The `mlflow` executable (a venv with the full mlflow) "
                                    "that serves the MLflow tests; without it they skip."),
    "RLMESH_STREAM_OFFLINE_RL_PYTHON": ("tests (`tests/datasets/test_offline_rl.py`), "
                                        "`.ci/run`", "The Python of a venv with d3rlpy, "
                                        "TorchRL and torch that trains on an export; without "
                                        "it the offline-RL tests skip."),
    "RLMESH_STREAM_BENCH_POSTGRES_DSN": ("`benchmarks/bench_consumers.py`", "A PostgreSQL "
                                         "server the benchmark also writes to."),
}


def _field_notes(cls: type) -> dict[str, str]:
    """What the comments say of each field of a dataclass: the comment on its line, else
    the comment block just above it (a block heading a group of fields is shown once, on
    its first field)."""
    notes: dict[str, str] = {}
    block: list[str] = []
    for line in inspect.getsource(cls).splitlines():
        text = line.strip()
        if text.startswith("#"):
            block.append(text.lstrip("#").strip())
            continue
        name, colon, rest = text.partition(":")
        if colon and name.isidentifier() and line.startswith("    ") and not line[4].isspace():
            _, _, trailing = rest.partition("  # ")
            notes[name] = " ".join([*block, trailing.strip()]).strip()
        block = []
    return notes


def _default(field: dataclasses.Field[Any]) -> str:
    if field.default is not dataclasses.MISSING:
        value = field.default
    elif field.default_factory is not dataclasses.MISSING:
        value = field.default_factory()
    else:
        return ""
    if value is None or value == frozenset():
        return "none"
    return f"`{value}`"


def _row(*cells: str) -> str:
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def _section(title: str, intro: list[str], columns: tuple[str, str, str],
             rows: list[tuple[str, str, str]]) -> list[str]:
    """A `##` section: its heading, its text, and a table of `rows`."""
    return ["", f"## {title}", "", *intro, *([""] if intro else []), _row(*columns),
            _row("---", "---", "---"), *(_row(*r) for r in rows)]


def render() -> str:
    """The page, as the code reads its settings now."""
    settings = ("variable", "default", "what it sets")
    notes = _field_notes(ProducerSettings)
    lines = [
        "# Settings: every `RLMESH_STREAM_*` variable",
        "",
        "Generated by `python -m rlmesh_stream.infra.settings_doc` from the code that reads",
        "them (a test fails when this page is stale). A command-line flag beats its variable,",
        "which beats the default.",
        *_section("Connection (`StreamConfig`)", [
            "Read by every command (`--bootstrap`, `--registry-url`, ...), by the hook",
            "(`KafkaRuntimeHooks.from_env()`) and by the tests, which use an existing stack when",
            "`RLMESH_STREAM_BOOTSTRAP` and `RLMESH_STREAM_REGISTRY_URL` are both set.",
        ], settings, [(f"`{ENV_PREFIX}{f.name.upper()}`", _default(f), _OPTIONS[f.name]["help"])
                      for f in dataclasses.fields(StreamConfig)]),
        *_section("The hook (`ProducerSettings`)", [
            "Read by `KafkaRuntimeHooks.from_env()` (docs/producer.md); keyword arguments win.",
            "`RLMESH_STREAM_DISABLED_EVENTS` is a comma-separated list of event types",
            "(`observation_emitted,action_received`); a spool directory turns the spool on.",
        ], settings, [(f"`{ENV_PREFIX}{f.name.upper()}`", _default(f), notes.get(f.name, ""))
                      for f in dataclasses.fields(ProducerSettings) if f.name in _PARSERS]),
        *_section("Commands, the stack and the tests", [], ("variable", "read by", "what it does"),
                  [(f"`{name}`", where, what) for name, (where, what) in sorted(OTHER.items())]),
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Generate docs/settings.md")
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is stale")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = DOC.read_text(encoding="utf-8") if DOC.exists() else ""
        if current != text:
            print(f"{DOC} is not current: run python -m rlmesh_stream.infra.settings_doc",
                  file=sys.stderr)
            return 1
        return 0
    DOC.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Specification: `rlmesh-stream --help` imports no command, and its lines are the commands' own.

The root help lists every command from `infra.cli.SUMMARIES` instead of importing each
command's module (the registry client's HTTP stack, DuckDB, pyarrow, the join...: 0.6 to
0.9 s of imports for a page of text). Structural checks, never timings.
"""

from __future__ import annotations

import json
import subprocess
import sys

import click
import pytest

from rlmesh_stream.infra.cli import COMMANDS, SUMMARIES, main

# what printing the root help must not load
HEAVY = ("confluent_kafka", "httpx", "httpx2", "authlib", "duckdb", "pyarrow", "numpy",
         "rich", "psycopg", "rlmesh_stream.consumers", "rlmesh_stream.producer",
         "rlmesh_stream.schemas.registry", "rlmesh_stream.schemas.codec")

PROBE = """
import contextlib, io, json, sys
from rlmesh_stream.infra.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    try:
        main(["--help"])
    except SystemExit:
        pass
print(json.dumps(sorted(sys.modules)))
"""


def test_root_help_imports_no_command_module_nor_heavy_library() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], check=True, capture_output=True,
                         text=True).stdout
    loaded = json.loads(out.splitlines()[-1])
    heavy = [m for m in loaded if any(m == h or m.startswith(f"{h}.") for h in HEAVY)]
    assert heavy == []


def test_every_command_has_a_summary() -> None:
    assert set(SUMMARIES) == set(COMMANDS)


@pytest.mark.parametrize("name", list(COMMANDS))
def test_summary_is_the_commands_own_first_sentence(name: str) -> None:
    command = main.get_command(click.Context(main), name)
    assert command is not None
    assert SUMMARIES[name] == command.get_short_help_str(limit=1000)


def test_root_help_lists_every_command_with_its_summary() -> None:
    text = subprocess.run([sys.executable, "-m", "rlmesh_stream.infra.cli", "--help"],
                          check=True, capture_output=True, text=True).stdout
    for name in COMMANDS:
        line = next(ln for ln in text.splitlines() if ln.split()[:1] == [name])
        shown = line.split(None, 1)[1].removesuffix("...")
        assert SUMMARIES[name].startswith(shown)


OFFSETS_ONLY = """
import json, sys
from rlmesh_stream.consumers.builders import make_builders
from rlmesh_stream.consumers.sinks import OffsetUpdate, SinkBatch, open_sink
sink = open_sink(sys.argv[1])
episodes = make_builders(["episodes"])[0]
before = "pyarrow" in sys.modules
sink.apply(SinkBatch(rows={t: [] for t in episodes.tables}, after_sql=list(episodes.after_sql),
                     offsets=[OffsetUpdate("episodes", "t", 0, None, 7)], group_id="g"))
print(json.dumps([before, "pyarrow" in sys.modules, sink.load_offsets("episodes")[("t", 0)]]))
"""


def test_a_checkpoint_of_offsets_only_stages_nothing(tmp_path) -> None:
    """A run over empty topics stores its partitions' offsets in a checkpoint without rows:
    nothing is staged, so pyarrow (and numpy, ~0.1 s of CPU) is never imported for it."""
    out = subprocess.run([sys.executable, "-c", OFFSETS_ONLY,
                          f"duckdb://{tmp_path}/tables.duckdb"],
                         check=True, capture_output=True, text=True).stdout
    assert json.loads(out.splitlines()[-1]) == [False, False, 7]


CONSUME_IMPORTS = """
import json, sys
import rlmesh_stream.consumers.consume_cli
from rlmesh_stream.consumers.builders import make_builders
make_builders(["episodes"])
loaded = sorted(m for m in sys.modules if "_pb2" in m or m.startswith("http.client"))
from rlmesh_stream.schemas import SpaceSpec
print(json.dumps([loaded, SpaceSpec.DESCRIPTOR.full_name]))
"""


def test_the_consume_command_imports_no_protobuf_type_nor_http_client() -> None:
    """The contract's protobuf types (~25 ms) and the registry client's HTTP module load
    when first used, not on a consumer's start-up path; `SpaceSpec` is still there."""
    out = subprocess.run([sys.executable, "-c", CONSUME_IMPORTS],
                         check=True, capture_output=True, text=True).stdout
    assert json.loads(out.splitlines()[-1]) == [[], "rlmesh.spaces.v1.SpaceSpec"]


DECLARED_IMPORTS = """
import json, sys
import rlmesh_stream.consumers.consume_cli
from rlmesh_stream.consumers.builders import make_builders
make_builders(["all"])
heavy = ("rlmesh_stream.schemas.contract.events", "rlmesh_stream.schemas.codec.avro_fastread")
loaded = sorted(m for m in heavy if m in sys.modules)
from rlmesh_stream.schemas import StepCompletedEvent
from rlmesh_stream.schemas.contract.topics import EventType
print(json.dumps([loaded, EventType.STEP_COMPLETED.event_class is StepCompletedEvent]))
"""


def test_declaring_the_builders_imports_no_event_class_nor_reader_generator() -> None:
    """A consumer's start-up declares its builders and tables without the event
    dataclasses (~10 ms) or the generated reader's machinery (~17 ms): its decoders load
    them once there is a record; the event classes are still there when asked for."""
    out = subprocess.run([sys.executable, "-c", DECLARED_IMPORTS],
                         check=True, capture_output=True, text=True).stdout
    assert json.loads(out.splitlines()[-1]) == [[], True]

"""Run in a child process by test_schema_decoder_safety.py: every Avro reader path fed
adversarial records, as a property. A crash (SIGSEGV from a C stack overflow, in fastavro
or the interpreter) ends this process with a signal, which the parent sees; a record read
instead of refused fails an assertion here. Prints one line per path and the number of
records each refused.

    python tests/schemas/decoder_paths.py   (with tests/ on PYTHONPATH)
"""

from __future__ import annotations

import functools
import sys
from collections import Counter
from collections.abc import Callable
from typing import Any

import fastavro
from hypothesis import given, settings
from hypothesis import strategies as st

from rlmesh_stream.schemas.codec.avro_fastread import Framing, compile_projection
from rlmesh_stream.schemas.codec.avro_reader import AvroReader, _refused, _trailing
from rlmesh_stream.schemas.contract.errors import CorruptPayloadError
from rlmesh_stream.schemas.contract.topics import EventType
from rlmesh_stream.schemas.contract.validate import MAX_META_DEPTH
from tests.contract_samples.hostile import deep, out_of_range, v2_schema, with_session_id

ET = EventType.EPISODE_COMPLETED
HEADER = b"\x00\x00\x00\x00\x07"
ITEMS = ["session_id", "step_count", "final_info"]
MAX_DEPTH = 6_000


def _framing() -> Framing:
    name = ET.event_class.__name__
    return Framing(5, functools.partial(_refused, name), functools.partial(_trailing, name))


def readers() -> dict[str, tuple[Callable[[bytes], Any], bytes]]:
    """Path name -> (framed value -> result, the bytes its writer schema adds at the end)."""
    ours = AvroReader(ET).framed_reader()
    assert ours is not None
    foreign = AvroReader(ET, fastavro.parse_schema(v2_schema()))
    assert foreign.framed_reader() is None  # read by fastavro
    paths: dict[str, tuple[Callable[[bytes], Any], bytes]] = {
        "generated": (ours, b""),
        "python projection": (functools.partial(
            compile_projection(ET, ITEMS, framed=_framing()), arg=None), b""),
        "fastavro (foreign writer schema)": (lambda v: foreign.read_at(v, 5), b"\x00"),
    }
    return paths


PATHS = readers()
REFUSED: Counter[str] = Counter()


def refused_by_every_path(payload: bytes) -> None:
    for name, (read, tail) in PATHS.items():
        try:
            read(HEADER + payload + tail)
        except CorruptPayloadError:
            REFUSED[name] += 1
        else:
            raise AssertionError(f"{name} read an adversarial record")


def read_by_every_path(payload: bytes) -> None:
    for name, (read, tail) in PATHS.items():
        read(HEADER + payload + tail)  # raises if refused: a record within the contract
        assert name


CHECK = settings(max_examples=40, deadline=None, database=None)


@CHECK
@given(st.integers(min_value=2 * MAX_META_DEPTH, max_value=MAX_DEPTH))
def deep_nesting_is_refused(depth: int) -> None:
    refused_by_every_path(deep(depth))


@CHECK
@given(st.integers(min_value=1, max_value=MAX_META_DEPTH))
def nesting_the_contract_allows_is_read(depth: int) -> None:
    read_by_every_path(deep(depth))


LONG = 2**63  # Avro's long is 64-bit: -LONG .. LONG - 1
TEN_BYTES = 2**69  # zigzag values of ten-byte varints stay below 2**70


@CHECK
@given(st.one_of(st.integers(min_value=LONG, max_value=TEN_BYTES - 1),
                 st.integers(min_value=-TEN_BYTES, max_value=-LONG - 1)))
def varints_outside_the_long_range_are_refused(value: int) -> None:
    refused_by_every_path(out_of_range(value))


@CHECK
@given(st.sampled_from([-LONG, LONG - 1, -(2**56), 2**56]))
def longs_at_the_edges_of_the_range_are_read(value: int) -> None:
    read_by_every_path(out_of_range(value))


@CHECK
@given(st.text(max_size=8), st.text(max_size=8))
def strings_holding_nul_are_refused(before: str, after: str) -> None:
    refused_by_every_path(with_session_id(f"{before}\x00{after}"))


def main() -> int:
    refused_by_every_path(deep(5_000))  # the reported records, first
    for value in (2**64 + 7, 2**63, -(2**63) - 1):
        refused_by_every_path(out_of_range(value))
    deep_nesting_is_refused()
    nesting_the_contract_allows_is_read()
    varints_outside_the_long_range_are_refused()
    longs_at_the_edges_of_the_range_are_read()
    strings_holding_nul_are_refused()
    for name in PATHS:
        print(f"{name}: refused {REFUSED[name]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

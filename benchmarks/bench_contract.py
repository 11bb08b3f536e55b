"""The contract's codecs side by side with fastavro on the hot-path event (no Kafka).

    python benchmarks/bench_contract.py [--lanes 8] [--number 20000]

Prints each codec's time per 8-lane `StepCompletedEvent` and the ratios that
matter: our Avro encoder vs fastavro's `schemaless_writer` (the engine inside
confluent-kafka's `AvroSerializer`), and our decoder (to typed events) vs
fastavro's reader (to dicts). Then the episodes builder's packed rows read from
framed `EpisodeCompletedEvent` values: the generated Python reader vs fastavro's reader
plus picking the columns. Ratios
from one run, measured side by side.
"""

from __future__ import annotations

import argparse
import functools
import io
import sys
import timeit
from typing import Any

import contract_codecs as bench
import fastavro

from rlmesh_stream.consumers.builders import EpisodesBuilder
from rlmesh_stream.schemas.codec.avro_fastread import Framing, compile_projection
from rlmesh_stream.schemas.codec.avro_reader import _refused, _trailing
from rlmesh_stream.schemas.codec.avro_writer import avro_writer
from rlmesh_stream.schemas.contract.avro import load_schema
from rlmesh_stream.schemas.contract.events import EpisodeCompletedEvent, RuntimeEnvContext
from rlmesh_stream.schemas.contract.topics import EventType


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lanes", type=int, default=8)
    parser.add_argument("--number", type=int, default=20000)
    args = parser.parse_args()
    times = bench.run(args.lanes, args.number)
    for name, us in times.items():
        print(f"{us:8.2f} us  {name}")
    enc = times["avro encode (fastavro.schemaless_writer, record dict given)"] / times[
        "avro encode (ours)"]
    dec = times["avro decode (fastavro.schemaless_reader, to dicts)"] / times[
        "avro decode (ours, to dataclasses)"]
    fast = times["avro decode (fastavro + conversion to dataclasses, no generated reader)"] / (
        times["avro decode (ours, to dataclasses)"])
    print(f"ratio: our Avro encoder is {enc:.1f}x faster than fastavro's writer")
    print(f"ratio: the generated Avro reader is {fast:.1f}x faster than fastavro's reader plus "
          "the conversion to dataclasses (what decoding costs without it)")
    print(f"ratio: our Avro decoder (to dataclasses) is {dec:.1f}x faster than fastavro's "
          "reader (to dicts)")
    projection_lines(args.number)
    return 0


def projection_lines(number: int) -> None:
    """The episodes builder's packed row of one framed EpisodeCompletedEvent, two ways."""
    et = EventType.EPISODE_COMPLETED
    items = list(EpisodesBuilder.projections[et].items)
    framing = Framing(5, functools.partial(_refused, "EpisodeCompletedEvent"),
                      functools.partial(_trailing, "EpisodeCompletedEvent"))
    event = EpisodeCompletedEvent(
        session_id="0193b7c2-5d1e-7a3c-9f00-4c2d1e0b9a77",
        route=RuntimeEnvContext(env_id="CartPole-v1", env_component_id="env-0",
                                model_component_id="model-0", lane=3),
        episode_id="0193b7c2-5d1e-7a3c-9f00-4c2d1e0b9a78", episode_record_id="ep-000042",
        episode_index=42, env_index=3, step_count=187, cumulative_reward=187.0,
        terminated=True, truncated=False, duration_ms=940, final_info={"is_success": True},
        success=True, seed=7, trial_index=42, predict_ms=0.21, step_ms=0.05)
    value = b"\x00\x00\x00\x00\x07" + avro_writer(et)(event)
    parsed = fastavro.parse_schema(load_schema(et))
    columns = [i for i in items if isinstance(i, str)]

    def by_fastavro(value: bytes, arg: Any) -> tuple[Any, ...]:  # the obvious alternative
        record = fastavro.schemaless_reader(io.BytesIO(value[5:]), parsed, None)
        return (*(_path(record, c) for c in columns), arg)

    readers = {"generated Python": compile_projection(et, items, framed=framing),
               "fastavro + picking the columns": by_fastavro}
    times = {name: min(timeit.repeat(lambda r=read: r(value, 0), number=number, repeat=5))
             / number * 1e6 for name, read in readers.items()}
    for name, us in times.items():
        print(f"{us:8.2f} us  episodes packed row of an EpisodeCompletedEvent ({name})")
    ours = times["generated Python"]
    fastavro_us = times["fastavro + picking the columns"]
    print(f"ratio: the generated projection is {fastavro_us / ours:.1f}x faster than "
          "fastavro's reader plus picking the columns")


def _path(record: dict[str, Any], path: str) -> Any:
    for name in path.split("."):
        record = record[name]
    return record


if __name__ == "__main__":
    sys.exit(main())

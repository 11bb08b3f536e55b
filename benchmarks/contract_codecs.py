"""Micro-benchmark of the contract's codecs on the hot-path event (no Kafka involved).

    python benchmarks/contract_codecs.py [--lanes 8] [--number 20000]

Times, per `StepCompletedEvent` with N lanes, the best of five runs of: our
Avro encoder, fastavro's `schemaless_writer` on the same record (the engine
inside confluent-kafka's `AvroSerializer`, without its dict conversion and
framing), our protobuf encoder, and the decoders. The producer's end-to-end
benchmark (encode + frame + produce vs `AvroSerializer` + produce) lives with
the producer; this one isolates the part `schemas` owns.
"""

from __future__ import annotations

import argparse
import io
import sys
import timeit
from typing import Any

import fastavro

from rlmesh_stream.schemas.codec.avro_reader import AvroReader
from rlmesh_stream.schemas.codec.proto_codec import proto_decoder
from rlmesh_stream.schemas.codec.serde import EventEncoder
from rlmesh_stream.schemas.contract.avro import load_schema
from rlmesh_stream.schemas.contract.events import RuntimeEnvContext, StepCompletedEvent
from rlmesh_stream.schemas.contract.topics import EventType


def step_event(lanes: int) -> StepCompletedEvent:
    route = RuntimeEnvContext(env_id="CartPole-v1", env_component_id="env-0",
                              model_component_id="model-0")
    return StepCompletedEvent(
        session_id="sess-0190a5d2-7c1e-7b3a-9f00-0000000000aa", route=route,
        episode_id="0190a5d2-7c1e-7b3a-9f00-123456789abc", episode_record_id="ep-000001",
        step=17, env_index=0, rewards=[1.0] * lanes, infos=None, terminated=[False] * lanes,
        truncated=[False] * lanes, autoreset_roll=[False] * lanes, predict_ms=0.5, step_ms=0.2)


def _best(stmt: str, env: dict[str, Any], number: int) -> float:
    return min(timeit.repeat(stmt, globals=env, number=number, repeat=5)) / number * 1e6


def run(lanes: int = 8, number: int = 20000) -> dict[str, float]:
    """Microseconds per call of each codec on one event."""
    event = step_event(lanes)
    avro, proto = EventEncoder("avro"), EventEncoder("protobuf")
    parsed = fastavro.parse_schema(load_schema(EventType.STEP_COMPLETED))
    payload = avro.encode(event)
    record = fastavro.schemaless_reader(io.BytesIO(payload), parsed, None)
    proto_payload = proto.encode(event)
    reader = AvroReader(EventType.STEP_COMPLETED)
    resolving = AvroReader(EventType.STEP_COMPLETED, generated=False)
    env = {
        "avro": avro, "proto": proto, "event": event, "parsed": parsed, "record": record,
        "io": io, "fastavro": fastavro, "payload": payload, "reader": reader,
        "resolving": resolving,
        "proto_payload": proto_payload, "proto_dec": proto_decoder(EventType.STEP_COMPLETED),
    }
    return {
        "avro encode (ours)": _best("avro.encode(event)", env, number),
        "avro encode (fastavro.schemaless_writer, record dict given)": _best(
            "b = io.BytesIO(); fastavro.schemaless_writer(b, parsed, record); b.getvalue()",
            env, number),
        "avro decode (ours, to dataclasses)": _best("reader(payload)", env, number),
        "avro decode (fastavro + conversion to dataclasses, no generated reader)": _best(
            "resolving(payload)", env, number),
        "avro decode (fastavro.schemaless_reader, to dicts)": _best(
            "fastavro.schemaless_reader(io.BytesIO(payload), parsed, None)", env, number),
        "protobuf encode (ours)": _best("proto.encode(event)", env, number // 4),
        "protobuf decode (ours)": _best("proto_dec(proto_payload)", env, number // 4),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lanes", type=int, default=8)
    parser.add_argument("--number", type=int, default=20000)
    args = parser.parse_args(argv)
    for name, us in run(args.lanes, args.number).items():
        print(f"{us:8.2f} us  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Hostile payloads of `EpisodeCompletedEvent` that any producer with registry access can
write: MetaLists nested thousands deep, varints outside Avro's 64-bit long. Each is our
writer's payload with one part spliced, so everything else in it is valid.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from rlmesh_stream.schemas.codec.avro_writer import avro_writer
from rlmesh_stream.schemas.codec.zigzag import ZZ
from rlmesh_stream.schemas.contract.avro import load_schema
from rlmesh_stream.schemas.contract.topics import EventType
from tests.contract_samples.examples import example

ET = EventType.EPISODE_COMPLETED
SENTINEL = "sentinel-0123456789"
STEPS = 123_456_789  # a step count whose varint is found once in the payload


def v2_schema() -> dict[str, Any]:
    """A compatible v2 of our schema, as another producer may register: one more
    optional field at the end (written as its null branch, one 0 byte)."""
    schema = load_schema(ET)
    schema["fields"].append({"name": "note", "type": ["null", "string"], "default": None})
    return schema


def _payload() -> bytes:
    event = example(ET)
    event.step_count = STEPS
    event.final_info = {"k": SENTINEL}
    return bytes(avro_writer(ET)(event))


def _splice(payload: bytes, old: bytes, new: bytes) -> bytes:
    assert payload.count(old) == 1, old
    return payload.replace(old, new)


def _meta_branch(name: str) -> bytes:
    branches = load_schema(ET)["fields"]
    meta = next(f for f in branches if f["name"] == "final_info")["type"][1]
    values = meta["fields"][0]["type"]["values"]
    names = [b if isinstance(b, str) else f"{b['namespace']}.{b['name']}" for b in values]
    return ZZ[names.index(name)]


def nested_lists(depth: int) -> bytes:
    """The MetaValue bytes of `depth` MetaLists one inside another."""
    tag = _meta_branch("rlmesh.spaces.v1.MetaList")
    return tag + (b"\x02" + tag) * (depth - 1) + b"\x00" * depth


def deep(depth: int) -> bytes:
    """Our payload with final_info {"k": [[...]]}, `depth` lists deep."""
    text = SENTINEL.encode()
    old = _meta_branch("string") + ZZ[len(text)] + text
    return _splice(_payload(), old, nested_lists(depth))


def varint(n: int) -> bytes:
    """The unsigned varint of `n` >= 0, whatever its size (protobuf's, and Avro's after the
    zigzag step)."""
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def long_varint(value: int) -> bytes:
    """The varint of the zigzag encoding of `value`, whatever its size (Avro's long is
    64-bit; this writes what it forbids too, where `zigzag.encode_long` refuses it)."""
    return varint((value << 1) if value >= 0 else ((-value) << 1) - 1)


def out_of_range(value: int) -> bytes:
    """Our payload with `step_count` written as `value` (any size)."""
    return _splice(_payload(), ZZ[STEPS], long_varint(value))


LANE, ENV_INDEX = 1_234_567, 7_654_321  # sentinels whose varints are found once


def with_route_lane_and_env_index(lane: int, env_index: int) -> bytes:
    """Our payload with `route.lane` and `env_index` written as any Avro long: another
    producer is bound by the schema (a long), not by the Rust types behind it."""
    event = example(ET)
    event.route = dataclasses.replace(event.route, lane=LANE)
    event.env_index = ENV_INDEX
    payload = bytes(avro_writer(ET)(event))
    payload = _splice(payload, ZZ[LANE], long_varint(lane))
    return _splice(payload, ZZ[ENV_INDEX], long_varint(env_index))


SESSION = "session-sentinel-0001"


def with_session_id(session_id: str) -> bytes:
    """Our payload with any `session_id` (a NUL in it, say)."""
    event = example(ET)
    event.session_id = SESSION
    raw, new = SESSION.encode(), session_id.encode()
    return _splice(bytes(avro_writer(ET)(event)), ZZ[len(raw)] + raw, ZZ[len(new)] + new)

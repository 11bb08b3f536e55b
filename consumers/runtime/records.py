"""What a builder sees of one Kafka record, and the value conversions rows need.

A builder never touches a `confluent_kafka.Message`: the runtime turns each
message into a `Record` (decoded event, where it came from, its timestamp and
headers), so builders stay pure functions from records to partial rows.
"""

from __future__ import annotations

import base64
import json
import math
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import Enum
from typing import TYPE_CHECKING, Any

from rlmesh_stream.schemas.contract.errors import DecodeError
from rlmesh_stream.schemas.contract.topics import EventType

TP = tuple[str, int]  # a topic partition: (topic, partition number)

if TYPE_CHECKING:  # hints only: the event dataclasses load when a decoder needs them
    from rlmesh_stream.schemas.contract.events import RuntimeEnvContext, RuntimeEvent


@dataclass(slots=True)
class Record:
    topic: str
    partition: int
    offset: int
    timestamp: datetime  # the record timestamp (producer create time), UTC
    event_type: EventType
    event: RuntimeEvent | None  # None for builders that read headers only
    headers: dict[str, bytes] = field(default_factory=dict)
    # a packed builder's row, when the runtime read it straight from the payload (then
    # `event` is None): see builders/projection.py
    values: tuple[Any, ...] | None = None


class TimestampOutOfRangeError(DecodeError):
    """A record timestamp no datetime holds (after the year 9999). Any producer may set a
    record's timestamp, and a broker takes it unless `message.timestamp.after.max.ms`
    says otherwise (an hour since Kafka 4.0; unbounded before)."""


# The record time of a record whose timestamp no datetime holds: it is dead-lettered, and
# only the builders that read headers (delivery checks) see it.
OUT_OF_RANGE = datetime.max.replace(tzinfo=UTC)


def timestamp_of(ms: int) -> datetime:
    """A Kafka record timestamp (ms since the epoch) as an aware UTC datetime."""
    try:
        return datetime.fromtimestamp(ms / 1000.0, tz=UTC)
    except (ValueError, OverflowError, OSError):
        raise TimestampOutOfRangeError(
            f"record timestamp {ms} ms is outside the years 1 to 9999") from None


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)


def epoch_ms(timestamp: datetime) -> int:
    """An aware datetime as whole milliseconds since the epoch (`timestamp_of`'s inverse)."""
    return (timestamp - _EPOCH) // _MS


def route_columns(route: RuntimeEnvContext) -> dict[str, Any]:
    return {
        "env_id": route.env_id,
        "env_component_id": route.env_component_id,
        "model_component_id": route.model_component_id,
        "lane": route.lane,
    }


def enum_text(value: Any) -> str:
    """An enum's wire value; decoders keep room for unknown variants as plain strings."""
    return str(value.value) if isinstance(value, Enum) else str(value)


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # JSON (and JSONB) have no NaN or infinity
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def meta_json(meta: dict[str, Any] | None) -> str | None:
    """A MetaMap as JSON text: bytes as base64, non-finite floats as strings."""
    if meta is None:
        return None
    try:  # the common case, plain JSON values: no copy (same text as after _jsonable)
        return _dumps(meta)
    except (TypeError, ValueError):  # bytes, NaN/infinity, non-string keys
        return json.dumps(_jsonable(meta), sort_keys=True)


_dumps = json.JSONEncoder(sort_keys=True, allow_nan=False).encode

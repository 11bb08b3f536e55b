"""The SDK's values as the events carry them: a UUIDv7 episode id, an env `info` as a
`MetaMap`, a step's leaves encoded, an rlmesh space spec as a Gymnasium space."""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Mapping
from typing import Any

import numpy as np

from rlmesh_stream.producer.leaves import LeafCodec
from rlmesh_stream.schemas.contract import events as ev

log = logging.getLogger(__name__)


def uuid7() -> str:
    """A UUIDv7 (time-ordered), as the runtime mints episode ids."""
    ms = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")
    value = (ms & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76
    value |= ((rand >> 62) & 0xFFF) << 64
    value |= 0b10 << 62
    value |= rand & ((1 << 62) - 1)
    return str(uuid.UUID(int=value))


def to_meta(value: Mapping[str, Any] | None) -> ev.MetaMap | None:
    """An env `info` as a `MetaMap`: numpy values made plain, unsupported values as text."""
    if value is None:
        return None
    return {str(k): _meta_value(v) for k, v in value.items() if v is not None}


def _meta_value(value: Any) -> ev.MetaValue:
    if isinstance(value, (bool, int, float, str, bytes)):
        return value
    if isinstance(value, np.generic):
        plain = value.item()
        return plain if isinstance(plain, (bool, int, float, str, bytes)) else str(plain)
    if isinstance(value, np.ndarray):
        return _meta_value(value.tolist())
    if isinstance(value, Mapping):
        return {str(k): _meta_value(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [_meta_value(v) for v in value if v is not None]
    return str(value)


Encoded = tuple[list[bytes], list[bytes], "ev.MetaMap | None"]


def encode_step(obs_codec: LeafCodec, act_codec: LeafCodec, event: Any) -> Encoded:
    """A `StepEvent`'s observation and action leaves and its info, as published."""
    info = event.info
    return (obs_codec.encode(event.observation), act_codec.encode(event.action),
            {} if type(info) is dict and not info else to_meta(info))


def gym_space(spec: Any) -> Any:
    if spec is None:
        return None
    try:
        return spec.to_gym_space()
    except Exception:  # an rlmesh spec Gymnasium cannot express: infer from values instead
        log.debug("cannot convert %r to a Gymnasium space", spec, exc_info=True)
        return None

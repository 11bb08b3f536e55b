"""In-memory histories for the joiner's tests: a topic (of one partition) per event type,
read as a consumer reads partitions at different paces."""

from __future__ import annotations

import random
from typing import Any

from rlmesh_stream.schemas.contract.topics import EventType

Read = tuple[EventType, int]  # a topic and an offset in its one partition


def interleaved(topics: dict[EventType, list[Any]], rng: random.Random,
                start: dict[EventType, int] | None = None) -> list[Read]:
    """Every record from `start` on, each topic in order, the topics in a random mix."""
    at = {t: (start or {}).get(t, 0) for t in topics}
    out: list[Read] = []
    while live := [t for t in topics if at[t] < len(topics[t])]:
        t = rng.choice(live)
        out.append((t, at[t]))
        at[t] += 1
    return out

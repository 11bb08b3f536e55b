"""The consumer runtime every builder shares: read, reduce, write rows + offsets at once.

Modelled on quixstreams' sinks and checkpointing: records are buffered per topic
partition and flushed at a checkpoint (every `checkpoint_interval` seconds or `max_batch`
records), here as ONE sink transaction holding every builder's rows and every
partition's next offset. On each (re)assignment the runtime seeks to the offsets stored
in the sink, not Kafka's: the sink is the source of truth, so a crash at any instant
leaves the tables as if each record was applied exactly once. Offsets are also committed
to Kafka after each checkpoint, so lag tools see the group's progress.

Records that cannot be decoded go to the dead-letter topic and the `dead_letters` table;
a registry that is down makes the runtime rewind to the last checkpoint and retry with
back-off, never skip.

The parts, one job each, composed by `core.ConsumerRuntime`:
- `offsets.py`: assignment and offsets (stored, next, ends, where reading starts, lag;
  whole sessions: the group's ends at start, a single member's check);
- `policy.py`: the buffer and the checkpoint policy (when to cut, aligned cuts);
- `checkpoint.py`: a cut reduced into one transaction, written and accounted for;
- `until_end.py`: the start check and stop rule of an offline run (whole sessions:
  every partition of the group read to its end at start, other members' as the sink
  says);
- `decoding.py`: the decoder cache (which reader per schema id) and its warm-up;
- `reader.py`: the per-record hot path, messages into Records and dead letters;
- `kafka_io.py`: the consumer's settings (a range assignment: partition i of every topic
  to one member), its connection made before the sink opens, client errors, metadata
  and watermarks;
- `options.py`: the options and the account of a checkpoint; `errors.py`: the errors.

What the runtime calls on a sink is declared by `consumers.sinks.Sink`: its required
calls and its optional hooks (`prepare`, `rewound`, `revoked`, `at_end`,
`group_offsets`), which default to no-ops there.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlmesh_stream.consumers.runtime.checkpoint import offset_ranges as _offset_ranges
    from rlmesh_stream.consumers.runtime.core import ConsumerRuntime
    from rlmesh_stream.consumers.runtime.decoding import Decoder
    from rlmesh_stream.consumers.runtime.errors import ConsumerError, RegistryDown
    from rlmesh_stream.consumers.runtime.kafka_io import Connection
    from rlmesh_stream.consumers.runtime.kafka_io import existing_topics as _existing_topics
    from rlmesh_stream.consumers.runtime.kafka_io import watermarks as _watermarks
    from rlmesh_stream.consumers.runtime.options import CheckpointInfo, RuntimeOptions

# Imported on first use: the builders import `runtime.records` (the record type they
# reduce), and the runtime's core imports the builders, so importing this package must
# not pull the core in.
_EXPORTS: dict[str, tuple[str, str]] = {
    "CheckpointInfo": ("options", "CheckpointInfo"),
    "Connection": ("kafka_io", "Connection"),
    "ConsumerError": ("errors", "ConsumerError"),
    "RegistryDown": ("errors", "RegistryDown"),
    "ConsumerRuntime": ("core", "ConsumerRuntime"),
    "Decoder": ("decoding", "Decoder"),
    "RuntimeOptions": ("options", "RuntimeOptions"),
    "_existing_topics": ("kafka_io", "existing_topics"),
    "_offset_ranges": ("checkpoint", "offset_ranges"),
    "_watermarks": ("kafka_io", "watermarks"),
}


def __getattr__(name: str) -> Any:
    try:
        module, attr = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    return getattr(importlib.import_module(f"{__name__}.{module}"), attr)


__all__ = [
    "CheckpointInfo",
    "Connection",
    "ConsumerError",
    "ConsumerRuntime",
    "Decoder",
    "RegistryDown",
    "RuntimeOptions",
    "_existing_topics",
    "_offset_ranges",
    "_watermarks",
]

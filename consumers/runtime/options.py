"""What a consumer run is told and what it reports: its options, the account of a
checkpoint (the errors that end a run: `errors.py`). The runtime's parts all read these; none of
them holds state."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlmesh_stream.consumers.runtime.records import Record


@dataclass
class RuntimeOptions:
    group_id: str
    from_beginning: bool = False
    until_end: bool = False
    max_batch: int = 20_000  # records per checkpoint
    checkpoint_interval: float = 1.0  # seconds between checkpoints
    # reading live at the stream's head, cut a checkpoint as soon as the writer is free
    # (the interval stays the bound: docs/consumers.md); False: only every interval
    eager_at_head: bool = True
    poll_batch: int = 2_000
    poll_timeout: float = 0.1
    dlq_topic: str | None = None  # default: {prefix}.dlq
    instance_id: str | None = None  # static group membership: a restart takes over at once
    # --until-end with no partitions: how long after its first assignment a process waits
    # for the group to settle before it stops (None: three session timeouts)
    settle_time: float | None = None
    # a partition whose stored offset is beyond its end (its topic was deleted and
    # recreated): read it again from its first record (False: stop with an error)
    reset_recreated: bool = False
    # Sessions owned whole (the dataset export, docs/datasets.md "Consumer groups"): the
    # sink reset to its committed state whenever reading goes back to its offsets
    # (`rewound`), and --until-end ending when every partition of the topics is read to
    # the end offsets seen at start. (Every group's assignment is range: partition i of
    # every topic to one member, `kafka_io.kafka_config`.)
    whole_sessions: bool = False
    # with `whole_sessions`: one member only (a single-writer format); a process whose
    # first assignment is not every partition stops with a ConsumerError
    single_member: bool = False
    kafka_overrides: dict[str, Any] = field(default_factory=dict)


@dataclass
class CheckpointInfo:
    """What one committed checkpoint applied (for progress and latency measurement)."""

    records: int  # records decoded and applied (dead letters not included)
    committed_at: float  # time.time() right after the sink's commit
    records_by_builder: dict[str, list[Record]]


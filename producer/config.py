"""Producer settings: everything `KafkaRuntimeHooks` can be tuned with, in one frozen object.

Connection settings (bootstrap, registry, topic prefix, security) stay in the
shared `StreamConfig`; this adds what only the publishing hook cares about:
wire format, the bounded queue and what happens when it is full, the spool,
per-event-type switches, the leaves size cap and the flush budgets.

Precedence: explicit argument > environment (`RLMESH_STREAM_*`) > default.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal

from rlmesh_stream.schemas.connection.config import ENV_PREFIX, StreamConfig
from rlmesh_stream.schemas.connection.redact import redact_url
from rlmesh_stream.schemas.contract.topics import EventType

Format = Literal["avro", "protobuf"]
Overflow = Literal["spool", "drop"]

FORMATS: tuple[str, ...] = ("avro", "protobuf")
OVERFLOWS: tuple[str, ...] = ("spool", "drop")


@dataclass(frozen=True)
class DeliveryFailure:
    """One accepted event that will never reach Kafka, handed to the error callback."""

    event_type: str
    session_id: str
    sequence: int
    reason: str


ErrorCallback = Callable[[DeliveryFailure], None]


@dataclass(frozen=True)
class ProducerSettings:
    """How the hook publishes. Defaults favour safety (idempotent, acks=all) and a cheap hot path.

    `queue_max_messages` / `queue_max_kbytes` bound librdkafka's in-memory
    queue; `max_block_ms` is the longest a callback waits for room in it
    before `overflow` applies ("spool": append to `spool_dir`, drained in
    order when Kafka answers; "drop": count and forget). `held_max_events`
    bounds the events held in memory while the registry is unreachable and
    no spool is configured.
    """

    stream: StreamConfig = field(default_factory=StreamConfig)
    format: Format = "avro"
    # librdkafka producer defaults (spec: idempotent, acks=all, zstd, linger batching,
    # and murmur2 so a key lands on the partition a Java producer would pick).
    linger_ms: int = 20
    compression: str = "zstd"
    acks: str = "all"
    idempotence: bool = True
    partitioner: str = "murmur2_random"
    delivery_timeout_ms: int = 300_000
    # The bounded in-memory queue and its overflow policy.
    queue_max_messages: int = 100_000
    queue_max_kbytes: int = 64 * 1024
    max_block_ms: float = 50.0
    overflow: Overflow = "drop"
    spool_dir: Path | None = None
    spool_max_bytes: int | None = None
    held_max_events: int = 10_000
    # How long records for a topic Kafka calls unknown / leaderless (still being created, or
    # a leader election) are held and retried before they are counted failed.
    topic_wait_s: float = 60.0
    # Payload shaping.
    disabled_events: frozenset[EventType] = frozenset()
    leaves_max_bytes: int | None = 512 * 1024
    # Flush budgets (seconds).
    session_end_flush_timeout_s: float = 2.0
    exit_flush_timeout_s: float = 10.0
    install_exit_handlers: bool = True
    # Serve the hook's Prometheus metrics on this port (producer/metrics.py); None: off.
    metrics_port: int | None = None
    on_error: ErrorCallback | None = field(default=None, compare=False)
    kafka_overrides: Mapping[str, Any] = field(default_factory=dict)

    def __repr__(self) -> str:
        """Every field, with URL passwords (the stream's) and secret librdkafka settings hidden."""
        shown = []
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "kafka_overrides":
                value = {k: "***" if _secret(k) else v for k, v in value.items()}
            shown.append(f"{f.name}={redact_url(repr(value))}")
        return f"ProducerSettings({', '.join(shown)})"

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise ValueError(f"format must be one of {FORMATS}, got {self.format!r}")
        if self.overflow not in OVERFLOWS:
            raise ValueError(f"overflow must be one of {OVERFLOWS}, got {self.overflow!r}")
        if self.overflow == "spool" and self.spool_dir is None:
            raise ValueError("overflow='spool' needs spool_dir")
        if self.max_block_ms < 0:
            raise ValueError("max_block_ms must be >= 0")
        if self.topic_wait_s < 0:
            raise ValueError("topic_wait_s must be >= 0")
        if self.leaves_max_bytes is not None and self.leaves_max_bytes < 0:
            raise ValueError("leaves_max_bytes must be >= 0 or None")

    @classmethod
    def from_env(
        cls, env: Mapping[str, str] | None = None, *, stream: StreamConfig | None = None,
        **overrides: Any,
    ) -> ProducerSettings:
        """Read `RLMESH_STREAM_<FIELD>` (e.g. `RLMESH_STREAM_SPOOL_DIR`); overrides win.

        `RLMESH_STREAM_DISABLED_EVENTS` is a comma-separated list of event type
        names (`observation_emitted,action_received`). A spool directory from
        either source turns the spool policy on unless `overflow` says otherwise.
        """
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        for f in fields(cls):
            raw = env.get(ENV_PREFIX + f.name.upper())
            if raw and f.name in _PARSERS:
                values[f.name] = _PARSERS[f.name](raw)
        overflow_given = "overflow" in values or "overflow" in overrides
        values.update(overrides)  # an explicit None (e.g. leaves_max_bytes=None) is honoured
        if values.get("spool_dir") is not None:
            values["spool_dir"] = Path(values["spool_dir"])
            if not overflow_given:
                values["overflow"] = "spool"
        elif values.get("overflow") == "spool" and "overflow" not in overrides:
            values["overflow"] = "drop"  # spool_dir=None switched the spool off
        if "disabled_events" in values:
            values["disabled_events"] = parse_event_types(values["disabled_events"])
        values["stream"] = stream if stream is not None else StreamConfig.from_env(env)
        return cls(**values)

    def with_overrides(self, **overrides: Any) -> ProducerSettings:
        return replace(self, **overrides)

    def kafka_config(self) -> dict[str, Any]:
        """librdkafka settings: the stack's connection plus the producer defaults above."""
        conf = self.stream.kafka_config()
        conf.update({
            "enable.idempotence": self.idempotence,
            "acks": self.acks,
            "compression.type": self.compression,
            "linger.ms": self.linger_ms,
            "partitioner": self.partitioner,
            "message.timeout.ms": self.delivery_timeout_ms,
            "queue.buffering.max.messages": self.queue_max_messages,
            "queue.buffering.max.kbytes": self.queue_max_kbytes,
        })
        conf.update(self.kafka_overrides)
        return conf


def parse_event_types(value: str | Any) -> frozenset[EventType]:
    """`"observation_emitted, log"` or an iterable of names / EventTypes -> a set of EventType."""
    items = value.split(",") if isinstance(value, str) else list(value)
    out: set[EventType] = set()
    for item in items:
        if isinstance(item, EventType):
            out.add(item)
        elif str(item).strip():
            out.add(EventType(str(item).strip()))
    return frozenset(out)


def _secret(key: str) -> bool:
    """A librdkafka setting whose value is a credential (sasl.password, ssl.key.password...)."""
    return any(word in key.lower() for word in ("password", "secret", "token"))


def _bool(raw: str) -> bool:
    return raw.strip().lower() in ("1", "true", "yes", "on")


def _optional_int(raw: str) -> int | None:
    return None if raw.strip().lower() in ("", "none", "off") else int(raw)


_PARSERS: dict[str, Callable[[str], Any]] = {
    "format": str,
    "linger_ms": int,
    "compression": str,
    "acks": str,
    "idempotence": _bool,
    "partitioner": str,
    "delivery_timeout_ms": int,
    "queue_max_messages": int,
    "queue_max_kbytes": int,
    "max_block_ms": float,
    "overflow": str,
    "spool_dir": Path,
    "spool_max_bytes": _optional_int,
    "held_max_events": int,
    "topic_wait_s": float,
    "disabled_events": parse_event_types,
    "leaves_max_bytes": _optional_int,
    "metrics_port": _optional_int,
    "session_end_flush_timeout_s": float,
    "exit_flush_timeout_s": float,
    "install_exit_handlers": _bool,
}

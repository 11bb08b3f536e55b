"""`rlmesh-stream tail EVENT`: decoded events printed live, one line each (or JSON).

Like kcat with the schema registry behind it: records are decoded by the
schema id in their header, so what is printed is what the consumers see. The
command never commits offsets and uses a throwaway consumer group, so tailing
a topic cannot disturb the consumers' groups or their positions.

Formatting lives in pure functions (`describe`, `to_jsonable`) so it is the
same for every event type without a formatter per type: payload leaves show as
sizes, spaces as their kind and shape, maps as compact JSON.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import enum
import json
import logging
import uuid
from collections.abc import Callable
from typing import Any

from rlmesh_stream.consumers.runtime.records import TimestampOutOfRangeError, timestamp_of
from rlmesh_stream.schemas.connection.config import StreamConfig
from rlmesh_stream.schemas.connection.redact import redact_secrets
from rlmesh_stream.schemas.contract.topics import EventType
from rlmesh_stream.schemas.errors import RlmeshStreamError


class TailError(RlmeshStreamError):
    """Tailing cannot go on (no Kafka, no registry, no such topic); the message says why."""


_LIBRDKAFKA_LOG = logging.getLogger("rlmesh_stream.tail.librdkafka")
_LIBRDKAFKA_LOG.addHandler(logging.NullHandler())  # silent unless logging is configured

MAX_FIELD_CHARS = 120
"""A field's text in a one-line description is cut here: a line stays a line."""


# --------------------------------------------------------------------------- formatting


def to_jsonable(value: Any) -> Any:
    """An event (or any field of one) as JSON-ready data, losing nothing.

    Bytes become base64 strings, enums their values, protobuf messages (spaces)
    their canonical JSON mapping.
    """
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    if hasattr(value, "DESCRIPTOR") and hasattr(value, "SerializeToString"):
        from google.protobuf.json_format import MessageToDict

        return MessageToDict(value)
    return value


def _short(value: Any) -> str:
    """One field for a one-line description."""
    if value is None:
        return "-"
    if isinstance(value, enum.Enum):
        return str(value.value)
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, list) and value and all(isinstance(v, bytes) for v in value):
        return f"<{len(value)} leaves, {sum(len(v) for v in value)} B>"
    if hasattr(value, "DESCRIPTOR") and hasattr(value, "WhichOneof"):
        kind = value.WhichOneof("spec") or "space"
        shape = list(getattr(value, "shape", []))
        return f"{kind}{shape}" if shape else kind
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return "{" + " ".join(f"{f.name}={_short(getattr(value, f.name))}"
                              for f in dataclasses.fields(value)
                              if not isinstance(getattr(value, f.name), list)) + "}"
    if isinstance(value, list) and len(value) > 8:
        return "[" + ", ".join(_short(v) for v in value[:8]) + f", … ({len(value)})]"
    if isinstance(value, list):
        return "[" + ", ".join(_short(v) for v in value) + "]"
    if isinstance(value, dict):
        text = json.dumps(to_jsonable(value), separators=(",", ":"), ensure_ascii=False)
    else:
        text = str(value)
    return text if len(text) <= MAX_FIELD_CHARS else text[:MAX_FIELD_CHARS - 1] + "…"


def describe(event: Any) -> str:
    """`key=value` pairs of an event's own fields (session and route are shown apart)."""
    parts = []
    for f in dataclasses.fields(event):
        if f.name in ("session_id", "route"):
            continue
        value = getattr(event, f.name)
        if f.name == "snapshot":
            parts.append(f"snapshot={value.horizon.value}:{len(value.rows)} rows")
        else:
            parts.append(f"{f.name}={_short(value)}")
    return " ".join(parts)


def route_text(route: Any) -> str:
    lane = "" if route.lane is None else f" lane={route.lane}"
    return f"env={route.env_id} model={route.model_component_id}{lane}"


def _record_time(timestamp_ms: int | None) -> dt.datetime | None:
    """The record time, or None: none set, or one no datetime holds (any producer may
    set a record's timestamp, a year past 9999 included)."""
    if timestamp_ms is None:
        return None
    try:
        return timestamp_of(timestamp_ms)
    except TimestampOutOfRangeError:
        return None


def format_line(event: Any, timestamp_ms: int | None) -> str:
    time = _record_time(timestamp_ms)
    when = "-" if time is None else time.strftime("%H:%M:%S.%f")[:-3]
    return f"{when} {event.session_id} [{route_text(event.route)}] {describe(event)}"


def format_json(event: Any, *, topic: str, partition: int, offset: int,
                timestamp_ms: int | None) -> str:
    """kcat-style envelope (where the record was) around the decoded event."""
    time = _record_time(timestamp_ms)
    doc = {
        "topic": topic, "partition": partition, "offset": offset,
        "timestamp": None if time is None else time.isoformat().replace("+00:00", "Z"),
        "key": event.session_id,
        "event": to_jsonable(event),
    }
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":"))


# --------------------------------------------------------------------------- consuming


def run_tail(config: StreamConfig, event_type: EventType, emit: Callable[[str], None], *,
             session_id: str | None = None, from_beginning: bool = False,
             as_json: bool = False, count: int | None = None, exit_at_end: bool = False,
             warn: Callable[[str], None] = lambda msg: None) -> int:
    """Consume and print until interrupted, `count` events, or (with `exit_at_end`) the end.

    Returns the number of events printed. Records of other sessions are skipped
    by their key before decoding, so `--session` is cheap on a busy topic.
    Raises TailError when Kafka, the registry or the topic is not there.
    """
    from confluent_kafka import KafkaException
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    from rlmesh_stream.schemas.connection.client_errors import ClientErrors
    from rlmesh_stream.schemas.contract.errors import (
        RegistryProtocolError,
        RegistryUnavailableError,
    )

    errors = ClientErrors()
    try:
        return _consume(config, event_type, emit, session_id=session_id,
                        from_beginning=from_beginning, as_json=as_json, count=count,
                        exit_at_end=exit_at_end, warn=warn,
                        errors=errors)
    except KafkaException as exc:
        err = exc.args[0] if exc.args else exc
        text = err.str() if hasattr(err, "str") else str(err)
        raise TailError(redact_secrets(f"Kafka at {config.bootstrap}: {errors.explain(text)}",
                                       config.bootstrap)) from exc
    except (RegistryUnavailableError, RegistryProtocolError, SchemaRegistryError) as exc:
        raise TailError(redact_secrets(f"schema registry at {config.registry_url}: {exc}",
                                       config.registry_url)) from exc


def _consume(config: StreamConfig, event_type: EventType, emit: Callable[[str], None], *,
             session_id: str | None, from_beginning: bool, as_json: bool, count: int | None,
             exit_at_end: bool, warn: Callable[[str], None],
             errors: Any) -> int:
    from confluent_kafka import Consumer, KafkaError, KafkaException
    from confluent_kafka.schema_registry import SchemaRegistryClient

    from rlmesh_stream.schemas.codec.serde import EventDecoder
    from rlmesh_stream.schemas.contract.errors import DecodeError

    topic = event_type.topic(config.topic_prefix)
    consumer = Consumer({
        **config.kafka_config(),
        "group.id": f"rlmesh-stream-tail-{uuid.uuid4().hex[:12]}",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest" if from_beginning else "latest",
        "enable.partition.eof": exit_at_end,
        # librdkafka's own retries and connection logs go to Python logging, not the
        # terminal: a failure reaches the user once, as a TailError.
        "logger": _LIBRDKAFKA_LOG,
        "error_cb": errors.on_error,  # the last one explains a failure
    })
    decoder = EventDecoder(SchemaRegistryClient(config.registry_config()))
    key = session_id.encode("utf-8") if session_id is not None else None
    printed = 0
    try:
        try:
            meta = consumer.list_topics(topic, timeout=config.connect_timeout).topics.get(topic)
        except KafkaException:
            consumer.poll(0)  # serves the queued client errors: the last one says why
            raise
        if meta is None or meta.error is not None:
            raise TailError(
                f"topic {topic} does not exist: check --topic-prefix "
                f"(now {config.topic_prefix!r}) and that producers have published")
        partitions = set(meta.partitions)
        at_end: set[int] = set()
        consumer.subscribe([topic])
        while count is None or printed < count:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            err = msg.error()
            partition, offset = msg.partition() or 0, msg.offset() or 0
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    at_end.add(partition)
                    if exit_at_end and at_end >= partitions:
                        break
                    continue
                raise KafkaException(err)
            at_end.discard(partition)
            if key is not None and msg.key() != key:
                continue
            try:
                event = decoder.decode(msg.value() or b"")
            except DecodeError as exc:
                warn(f"{topic}[{partition}]@{offset}: cannot decode: {exc}")
                continue
            _, ts = msg.timestamp()
            ts_ms = ts if ts > 0 else None
            if as_json:
                emit(format_json(event, topic=topic, partition=partition, offset=offset,
                                 timestamp_ms=ts_ms))
            else:
                emit(format_line(event, ts_ms))
            printed += 1
    finally:
        consumer.close()
    return printed

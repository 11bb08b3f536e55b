"""The per-record hot path: a consume() batch of Kafka messages turned into buffered
Records (decoded events, or packed rows read straight from the payload) and dead letters.

librdkafka hands a partition's records over in runs: what they share (assigned? the next
offset expected, the topic's plan, the projection's reader of the last value header) is
looked up once per run. A record below its partition's next expected offset (buffered or
applied already), or of a partition no longer held, is skipped."""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import KafkaError, Message

from rlmesh_stream.consumers.deadletter import DeadLetter
from rlmesh_stream.consumers.runtime.decoding import (
    Decoders,
    check_event_type,
    check_key,
    check_session_key,
)
from rlmesh_stream.consumers.runtime.errors import ConsumerError, RegistryDown
from rlmesh_stream.consumers.runtime.kafka_io import ConsumerErrors, header_dict, header_pairs
from rlmesh_stream.consumers.runtime.offsets import Offsets
from rlmesh_stream.consumers.runtime.policy import CheckpointPolicy
from rlmesh_stream.consumers.runtime.records import OUT_OF_RANGE, TP, Record, timestamp_of
from rlmesh_stream.schemas.contract.errors import (
    DecodeError,
    RegistryProtocolError,
    RegistryUnavailableError,
)

_UNSEEN = object()  # a value header not looked up yet
# longer than a value header, so a run's first record looks its reader up (a value that
# does start with it has no reader in hand, and is decoded whole)
_NO_HEAD = b"\xff" * 6
# The headers of a record whose builders read none: one shared dict, never written to.
_NO_HEADERS: dict[str, bytes] = {}
_EOF = KafkaError._PARTITION_EOF


class Reader:
    """Buffers what is read into the checkpoint policy's buffer."""

    def __init__(self, decoders: Decoders, offsets: Offsets, policy: CheckpointPolicy,
                 errors: ConsumerErrors) -> None:
        self.decoders, self.offsets, self.policy, self.errors = decoders, offsets, policy, errors
        self._stamps: dict[int, Any] = {}  # record timestamp (ms) -> its datetime
        self.first_record_at: float | None = None  # monotonic time of the first record read

    def ingest(self, messages: list[Message]) -> None:
        """Buffer a consume() batch as Records: the per-record hot path.

        Headers are only read for topics a header-reading builder takes, and a record's
        timestamp datetime is shared with the records of the same millisecond. A
        registry that does not answer raises `RegistryDown` (what was buffered before
        it is good)."""
        if not messages:
            return
        if self.first_record_at is None and any(m.error() is None for m in messages):
            self.first_record_at = time.monotonic()  # not an end-of-partition report's
        decoders = self.decoders
        decoders.wait_warm()
        assigned, nxt = self.offsets.assigned, self.offsets.next
        append = self.policy.buffer.append
        decode = decoders.decoder().decode if decoders.any_decode else None
        stamps = self._stamps
        if len(stamps) > 4096:
            stamps.clear()
        plans, projectors = decoders.plans, decoders.projectors
        run: TP | None = None  # the partition of the run of messages being read
        message: Any  # without an error, topic(), partition() and offset() are set
        for message in messages:
            error = message.error()
            if error is not None:
                if error.code() == _EOF:  # in line: every record before it was read
                    self.offsets.reached_end((message.topic(), message.partition()),
                                             message.offset())
                    run = None  # the run's next offset may have moved
                else:
                    self.errors.record_error(message)
                continue
            topic = message.topic()
            partition = message.partition()
            if run is None or partition != run[1] or topic != run[0]:
                # a new run: what a partition's records share, looked up once per run
                run = key = (topic, partition)
                taken = key in assigned  # not: fetched before a revoke
                expected = nxt.get(key, -1)  # below it: already buffered or applied
                event_type, needs_decode, reads_headers, packer, keyed = plans[topic]
                readers, head, project = projectors[topic], _NO_HEAD, None
            offset = message.offset()
            if not taken or offset < expected:
                continue
            headers = header_dict(message) if reads_headers else _NO_HEADERS
            ts_ms = message.timestamp()[1]
            stamp = stamps.get(ts_ms)
            if stamp is None:
                try:
                    stamp = stamps[ts_ms] = timestamp_of(ts_ms)
                except DecodeError as exc:  # a time no datetime holds: no builder can use it
                    nxt[key] = offset + 1
                    append(dead_letter(message, exc))
                    append(Record(topic, partition, offset, OUT_OF_RANGE, event_type, None,
                                  headers))
                    continue
            event = None
            value = message.value() if needs_decode else None
            if packer is not None and value:  # the packed row, straight from the payload
                if not value.startswith(head):  # another header than the run's last one's
                    head = value[:5]
                    project = readers.get(head, _UNSEEN)
                    if project is _UNSEEN:
                        project = decoders.projector(topic, value, packer)
                    if project is None:  # decoded whole: the next one looks again
                        head = _NO_HEAD
                if project is not None:
                    nxt[key] = offset + 1
                    try:
                        values = project(value, ts_ms)  # packed: timestamps in ms
                        if keyed:  # the session id first (`Builder.packed_items`)
                            check_session_key(values[0], message.key())
                    except DecodeError as exc:
                        append(dead_letter(message, exc))
                        values = None
                    append(Record(topic, partition, offset, stamp, event_type, None, headers,
                                  values))
                    continue
            if needs_decode:
                try:
                    event = decode(value)  # type: ignore[misc,arg-type]  # None: a tombstone, named as one
                    check_event_type(event, event_type, topic)
                    if keyed:
                        check_key(event, message.key())
                except RegistryUnavailableError as exc:
                    raise RegistryDown(str(exc)) from exc
                except RegistryProtocolError as exc:  # a wrong URL: waiting cannot help
                    raise ConsumerError(str(exc)) from exc
                except DecodeError as exc:
                    event = None
                    # dead-lettered, yet still a delivered record: header-only builders
                    # (delivery checks) see it as a Record with no event
                    append(dead_letter(message, exc))
            nxt[key] = offset + 1
            append(Record(topic, partition, offset, stamp, event_type, event, headers))


def dead_letter(message: Any, exc: DecodeError) -> DeadLetter:
    value = message.value()
    return DeadLetter(message.topic(), message.partition(), message.offset(),
                      f"{type(exc).__name__}: {exc}", message.key(),
                      value if isinstance(value, bytes) else None, header_pairs(message))

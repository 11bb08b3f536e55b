"""The hot path: one event in, encoded, stamped, and produced to librdkafka or held.

`Publisher.publish` runs inline in the rollout up to three times per step,
so it is one function on purpose (every call, attribute or dict lookup
saved is saved per event; see benchmarks/). It makes the hold-or-produce
decision once and has the hook's one produce site for new events: an
event whose schema id is not known yet, or that arrives while the backlog
holds anything, is held (order is kept); otherwise it goes to librdkafka,
waiting at most `max_block_ms` for room in a full queue before the
overflow policy applies (spool: hold it; drop: count it and shed until
the queue takes one again).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from types import MethodType
from typing import Any, Protocol

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from rlmesh_stream.producer.config import ProducerSettings
from rlmesh_stream.producer.delivery import Ledger
from rlmesh_stream.producer.encoding import PayloadEncoder
from rlmesh_stream.producer.outcomes import Outcomes
from rlmesh_stream.producer.records import Headers, Record
from rlmesh_stream.schemas.contract import headers as h
from rlmesh_stream.schemas.contract.topics import EventType

_STAMP = h.PRODUCER_SEQUENCE
_OMITTED = h.LEAVES_OMITTED_BYTES
_FULL_RETRY_SLEEP_S = 0.0005
# Every 256th event, the publishing thread serves the delivery reports that are ready
# (`Drainer.serve_inline`).
_SERVE_MASK = 255


class Slot:
    """Everything the hot path needs about one event type, looked up once (no enum hashing)."""

    __slots__ = ("enabled", "encode", "et", "event_class", "leaf_cap", "leaf_fields", "prefix",
                 "topic")

    def __init__(self, et: EventType, topic: str, enabled: bool,
                 leaf_fields: tuple[str, ...] | None, leaf_cap: int,
                 encode: Callable[..., bytes] | None) -> None:
        self.et = et
        self.event_class = et.event_class
        self.encode = encode  # for an event of exactly event_class; None: the encoder's dispatch
        self.topic = topic
        self.enabled = enabled
        self.leaf_fields = leaf_fields
        self.leaf_cap = leaf_cap
        self.prefix: bytes | None = None  # the wire-format prefix, once the schema id is known


class DeliveryReports(Protocol):
    """Where the hot path hands a record's fate (`drainer.Drainer`).

    Named here so the publisher does not import the drainer: the drainer
    imports the schema ids, which import `Slot` from this module.
    """

    def on_delivery(self, headers: Headers | bytes, err: KafkaError | None,
                    msg: Message) -> None: ...

    def refused(self, record: Record, exc: KafkaException) -> None: ...

    def serve_inline(self) -> None: ...


class Publisher:
    """Encodes, sequences and produces (or holds) each event the runtime hands the hook."""

    def __init__(self, settings: ProducerSettings, producer: Producer, ledger: Ledger,
                 encoder: PayloadEncoder, outcomes: Outcomes, drainer: DeliveryReports,
                 producer_id: str) -> None:
        self.closed = False
        # The `rlmesh.ps` value: this producer's prefix, then the sequence number.
        self._stamp = h.stamp_prefix(producer_id).replace(b"%", b"%%") + b"%d"
        # The last session's id and key: consecutive events mostly share their session.
        self._last_key: tuple[str, bytes] = ("", b"")
        self._shedding = False  # the queue stayed full past max_block_ms (drop policy)
        self._spooling = settings.overflow == "spool"
        self._max_block_s = settings.max_block_ms / 1000.0
        self._ledger = ledger
        self._outcomes = outcomes
        # Bound once: the hot path calls them per event.
        self._encode = encoder.encode
        self._next_sequence = ledger.next_sequence
        self._handed = ledger.note_handed
        self._produce_now = producer.produce
        self._report = drainer.on_delivery
        self._refused = drainer.refused
        self._serve_reports = drainer.serve_inline

    def publish(self, slot: Slot, event: Any) -> None:
        """The hot path (see the module docstring); never raises."""
        if not slot.enabled:
            with self._ledger.lock:
                self._ledger.disabled += 1
            return
        if self.closed:
            self._next_sequence()
            self._outcomes.drop("after close")
            return
        omitted = 0
        try:
            leaf_fields = slot.leaf_fields
            if leaf_fields is not None:
                size = 0
                for name in leaf_fields:
                    leaves = getattr(event, name)
                    if leaves:
                        size += sum(map(len, leaves))
                if size > slot.leaf_cap:
                    # An oversized payload goes without its leaves, flagged, never cut or split.
                    omitted = size
                    event = dataclasses.replace(event, **dict.fromkeys(leaf_fields))
            if type(event) is not slot.event_class:
                # Never framed with another type's schema id: refused, counted as a contract
                # failure.
                raise TypeError(f"{slot.et.value} takes a {slot.event_class.__name__}, "
                                f"not a {type(event).__name__}")
            prefix = slot.prefix  # read once: framed with it, or held unframed without it
            encode = slot.encode
            if encode is None:  # the encoder's own dispatch (protobuf, a custom encoder)
                value = self._encode(event)
                if prefix is not None:
                    value = prefix + value
            elif prefix is None:
                value = encode(event)
            else:  # the generated Avro writer frames in its one join: no copy of the payload
                value = encode(event, prefix)
        except Exception as exc:
            self._outcomes.reject(slot.et, event, exc)
            return
        seq = self._next_sequence()
        stamp = self._stamp % seq
        # A dict of bytes: the garbage collector does not track it (a list of tuples it does).
        headers: dict[str, str | bytes | None] = {_STAMP: stamp}
        # What a failure's report needs to rebuild the headers: the stamp alone (bytes, no
        # container) unless there is more to them.
        account: bytes | dict[str, str | bytes | None] = stamp
        if omitted:
            headers[_OMITTED] = b"%d" % omitted
            account = headers
            with self._ledger.lock:
                self._ledger.leaves_omitted += 1
        session, key = self._last_key
        if event.session_id != session:
            session = event.session_id
            key = session.encode("utf-8")
            self._last_key = (session, key)  # one attribute: threads never see a torn pair
        # The hold-or-produce decision: no schema id yet, or the backlog holds something.
        if prefix is None:
            self._outcomes.hold(Record(slot.et, key, value, False, headers, seq))
            return
        if self._outcomes.active:
            self._outcomes.hold(Record(slot.et, key, value, True, headers, seq))
            return
        deadline = 0.0
        while True:
            try:
                # Positional (partition -1 = the partitioner's choice, timestamp 0 = now): the
                # client parses keywords noticeably slower. Delivery reports carry no headers:
                # the callback keeps what rebuilds them for a failure's account (only failures
                # are reported): the report bound to it as a method, the one object per record
                # the garbage collector counts while librdkafka holds the record (a
                # functools.partial is two; binding the headers' dict was two as well).
                self._produce_now(slot.topic, value, key, -1, MethodType(self._report, account),
                                  None, 0, headers)
                self._handed(len(value))
                if not seq & _SERVE_MASK:
                    self._serve_reports()
                if self._shedding:
                    self._shedding = False
                return
            except BufferError:
                # librdkafka's queue is full: wait (bounded) for room, unless already shedding.
                if not deadline:
                    if self._shedding and not self._spooling:
                        break
                    deadline = time.monotonic() + self._max_block_s
                if time.monotonic() >= deadline:
                    break
                time.sleep(_FULL_RETRY_SLEEP_S)
            except KafkaException as exc:
                self._refused(Record(slot.et, key, value, True, headers, seq), exc)
                return
        if self._spooling:
            self._outcomes.hold(Record(slot.et, key, value, True, headers, seq))
            return
        self._shedding = True
        self._outcomes.drop("queue full")

"""Delivery checks: every producer sequence number seen, so gaps and duplicates show.

Reads headers only (no decoding), over every event topic. Sequences are kept
per (producer_id, seq) in the shared store, so processes that each read a
share of the partitions still add up to one fleet-wide view
(`delivery_producers`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar

from consumers.builders.base import Builder, PartialRow
from consumers.records import Record
from consumers.tables import DELIVERY_SEQUENCES, Table
from schemas import headers as h
from schemas.topics import EventType


class DeliveryBuilder(Builder):
    name = "delivery"
    event_types: ClassVar[frozenset[EventType]] = frozenset(EventType)
    tables: ClassVar[tuple[Table, ...]] = (DELIVERY_SEQUENCES,)
    needs_decode = False

    def rows(self, record: Record) -> Iterator[PartialRow]:
        producer = record.headers.get(h.PRODUCER_ID)
        seq = record.headers.get(h.SEQUENCE)
        if producer is None or seq is None:
            return
        try:
            number = int(seq)
        except ValueError:
            return
        yield DELIVERY_SEQUENCES, {
            "producer_id": producer.decode("utf-8", "replace"), "seq": number,
            "copies": 1, "first_topic": record.topic,
        }

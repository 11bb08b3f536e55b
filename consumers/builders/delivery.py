"""Delivery checks: every producer sequence number seen, so gaps and duplicates show.

Reads headers only (no decoding), over every event topic. A batch's sequences
are staged per (producer_id, seq) and merged into the contiguous ranges of
`delivery_sequences` in the shared store, in the batch's transaction, so
processes that each read a share of the partitions still add up to one
fleet-wide view (`delivery_producers`). The merge reads and rewrites a
producer's ranges, so batches of one producer take a lock on it and apply one
after the other.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar

from rlmesh_stream.consumers.builders.base import Builder, PartialRow, Reduced
from rlmesh_stream.consumers.records import Record
from rlmesh_stream.consumers.tables import DELIVERY_BATCH, DELIVERY_MERGE_SQL, Table
from rlmesh_stream.schemas import headers as h
from rlmesh_stream.schemas.topics import EventType


class DeliveryBuilder(Builder):
    name = "delivery"
    event_types: ClassVar[frozenset[EventType]] = frozenset(EventType)
    tables: ClassVar[tuple[Table, ...]] = (DELIVERY_BATCH,)
    needs_decode = False
    after_sql = DELIVERY_MERGE_SQL

    def lock_keys(self, reduced: Reduced) -> list[str]:
        """The batch's producers: merging into their ranges reads them."""
        producers = {key[0] for key in reduced.rows.get(DELIVERY_BATCH.name, {})}
        return [f"delivery:{p}" for p in sorted(producers)]

    def rows(self, record: Record) -> Iterator[PartialRow]:
        producer = record.headers.get(h.PRODUCER_ID)
        seq = record.headers.get(h.SEQUENCE)
        if producer is None or seq is None:
            return
        try:
            number = int(seq)
        except ValueError:
            return
        yield DELIVERY_BATCH, {
            "producer_id": producer.decode("utf-8", "replace"), "seq": number, "copies": 1,
        }

"""Delivery checks: every producer sequence number seen, so gaps and duplicates show.

Reads headers only (no decoding), over every event topic, in either version of the
contract (`schemas.headers.delivery_stamp`). A batch's sequences
are staged per (producer_id, seq) and merged into the contiguous ranges of
`delivery_sequences` in the shared store, in the batch's transaction, so
processes that each read a share of the partitions still add up to one
fleet-wide view (`delivery_producers`). A sequence header that is not a number in
[0, MAX_SEQUENCE] goes to `invalid_headers` instead: one bad header must neither stop
the batch's transaction nor hide a gap. The merge reads and rewrites a
producer's ranges, so batches of one producer take a lock on it and apply one
after the other.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar

from rlmesh_stream.consumers.builders.base import Builder, PartialRow, Reduced, key_bucket
from rlmesh_stream.consumers.runtime.records import Record
from rlmesh_stream.consumers.table_model import Table
from rlmesh_stream.consumers.tables import DELIVERY_BATCH, DELIVERY_MERGE_SQL, INVALID_HEADERS
from rlmesh_stream.schemas.contract import headers as h
from rlmesh_stream.schemas.contract.topics import EventType


class DeliveryBuilder(Builder):
    name = "delivery"
    event_types: ClassVar[frozenset[EventType]] = frozenset(EventType)
    tables: ClassVar[tuple[Table, ...]] = (DELIVERY_BATCH, INVALID_HEADERS)
    needs_decode = False
    drops_duplicates = False  # it counts them
    after_sql = DELIVERY_MERGE_SQL

    def lock_keys(self, reduced: Reduced) -> list[str]:
        """The buckets of the batch's producers (`key_bucket`): merging into their ranges
        reads them."""
        producers = {key[0] for key in reduced.rows.get(DELIVERY_BATCH.name, {})}
        return [f"delivery:{b}" for b in sorted({key_bucket(p) for p in producers})]

    def rows(self, record: Record) -> Iterator[PartialRow]:
        stamp = h.delivery_stamp(record.headers)  # either version of the contract's headers
        if stamp is None:
            return
        header, producer, seq = stamp
        producer_id = producer.decode("utf-8", "replace")
        try:
            number = h.parse_sequence(seq)
        except ValueError as exc:  # counted, never stored as a sequence: see INVALID_HEADERS
            yield INVALID_HEADERS, {
                "topic": record.topic, "partition_id": record.partition,
                "record_offset": record.offset, "header": header,
                "producer_id": producer_id, "header_value": seq.decode("utf-8", "replace"),
                "reason": str(exc), "record_time": record.timestamp,
            }
            return
        yield DELIVERY_BATCH, {"producer_id": producer_id, "seq": number, "copies": 1}

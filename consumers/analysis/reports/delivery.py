"""Delivery check per producer: did every record a producer sent arrive, exactly once?

Producers stamp each record with their id and a per-producer sequence number
(see `rlmesh_stream.schemas.contract.headers`); the consumers keep the sequences seen, as contiguous
ranges, in `delivery_sequences` and summarise them in the `delivery_producers` view. This
report reads that view, so it counts exactly what the consumers define as a
gap or a duplicate. A loss after a producer's last received record cannot be
seen from sequence numbers alone, which the report says. Records whose sequence header
is unusable (`invalid_headers`) are counted and listed apart.
"""

from __future__ import annotations

from rlmesh_stream.consumers.analysis.reports.model import Column, Report
from rlmesh_stream.consumers.analysis.reports.store import Store, require_table
from rlmesh_stream.consumers.tables import DELIVERY_PRODUCERS

_SQL = f"""
SELECT producer_id, records, distinct_sequences, min_seq, max_seq, gaps, duplicates
FROM {DELIVERY_PRODUCERS.name}
ORDER BY (gaps > 0 OR duplicates > 0) DESC, gaps DESC, duplicates DESC, producer_id
"""

_INVALID_SQL = """
SELECT producer_id, topic, partition_id, record_offset, header, header_value, reason
FROM invalid_headers ORDER BY producer_id, topic, partition_id, record_offset
"""
MAX_INVALID_SHOWN = 5


def _invalid_note(r: dict[str, object]) -> str:
    return (f"Invalid {r['header']} header, left out of the counts above: producer "
            f"{r['producer_id']}, {r['topic']}[{r['partition_id']}]@{r['record_offset']}: "
            f"{r['header_value']!r} ({r['reason']})")


COLUMNS = [
    Column("producer_id", "Producer"),
    Column("records", "Records", "right", "int"),
    Column("distinct_sequences", "Distinct seqs", "right", "int"),
    Column("min_seq", "First seq", "right", "int"),
    Column("max_seq", "Last seq", "right", "int"),
    Column("gaps", "Gaps", "right", "int"),
    Column("duplicates", "Duplicates", "right", "int"),
]


def delivery_report(store: Store) -> Report:
    """One row per producer id, producers with gaps or duplicates first."""
    require_table(store, DELIVERY_PRODUCERS)
    rows = store.query(_SQL).dicts()
    summary: dict[str, object] = {
        "producers": len(rows),
        "records": sum(int(r["records"]) for r in rows),
        "producers with gaps": sum(1 for r in rows if r["gaps"]),
        "missing records": sum(int(r["gaps"]) for r in rows),
        "duplicate records": sum(int(r["duplicates"]) for r in rows),
    }
    if store.has_table("dead_letters"):
        summary["dead letters"] = int(store.query("SELECT COUNT(*) FROM dead_letters").rows[0][0])
    notes = ["Gaps are missing sequence numbers below a producer's last received one; "
             "records lost after it cannot be detected here."]
    if store.has_table("invalid_headers"):
        invalid = store.query(_INVALID_SQL).dicts()
        summary["invalid headers"] = len(invalid)
        notes.extend(_invalid_note(r) for r in invalid[:MAX_INVALID_SHOWN])
        if len(invalid) > MAX_INVALID_SHOWN:
            notes.append(f"... and {len(invalid) - MAX_INVALID_SHOWN} more records with an "
                         "invalid header (table `invalid_headers`).")
    return Report(
        name="delivery",
        title="Delivery check per producer",
        columns=COLUMNS,
        rows=rows,
        row_classes=["caution" if r["gaps"] or r["duplicates"] else "" for r in rows],
        summary=summary,
        notes=notes,
        empty_message="No producer records in the store yet.",
    )

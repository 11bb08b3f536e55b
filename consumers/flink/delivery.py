"""The `delivery_producers` view: per producer, records, sequences, gaps and duplicates.

The delivery builder (`builders/delivery.py`) stages each record's (producer_id, seq) as
a `delivery_batch` row (`copies` summed) and merges them into the contiguous ranges of
`delivery_sequences`, over which `tables.DELIVERY_PRODUCERS` counts. Here every record
of every topic is a `delivery_batch` partial row, merged per (producer_id, seq) by the
table's own rules; that relation is a `delivery_sequences` of one range per sequence
(first_seq = last_seq = seq, records = copies), and `DELIVERY_PRODUCERS`'s own SQL
counts over it: its sums, minimum and maximum do not depend on how the ranges are cut.
(Merging the ranges themselves needs window functions over the history, which Flink's
streaming mode only has over a time attribute.)

The headers are read as `schemas.headers.delivery_stamp` reads them: version 2's
`rlmesh.ps` = `<producer id>:<seq>` (split at the last `:`; no `:`, no producer id),
else version 1's `rlmesh.producer_id` and `rlmesh.seq`; a record with a sequence that is
not a decimal number in [0, MAX_SEQUENCE] is left out (the builder counts it in
`invalid_headers`, which has no view).
"""

from __future__ import annotations

from rlmesh_stream.consumers.builders.projection import Const
from rlmesh_stream.consumers.flink.render import FlinkView, Partial, Sql, literal, merged_sql
from rlmesh_stream.consumers.table_model import Column
from rlmesh_stream.consumers.tables import DELIVERY_BATCH, DELIVERY_PRODUCERS
from rlmesh_stream.schemas.contract import headers as h
from rlmesh_stream.schemas.contract.topics import EVENT_TYPES


def _header(name: str) -> str:
    return f"CAST(`kafka_headers`[{literal(name)}] AS STRING)"


_PS, _PID, _SEQ = (_header(h.PRODUCER_SEQUENCE), _header(h.PRODUCER_ID), _header(h.SEQUENCE))
_SEP = h.SEPARATOR.decode()
_HAS_SEP = f"POSITION({literal(_SEP)} IN {_PS}) > 0"
PRODUCER = (f"CASE WHEN {_PS} IS NOT NULL THEN (CASE WHEN {_HAS_SEP} THEN "
            f"REGEXP_EXTRACT({_PS}, '(?s)^(.*){_SEP}[^{_SEP}]*\\z', 1) ELSE '' END) "
            f"ELSE {_PID} END")
SEQUENCE_TEXT = (f"CASE WHEN {_PS} IS NOT NULL THEN (CASE WHEN {_HAS_SEP} THEN "
                 f"REGEXP_EXTRACT({_PS}, '(?s)^.*{_SEP}([^{_SEP}]*)\\z', 1) ELSE {_PS} END) "
                 f"ELSE {_SEQ} END")
# the digits without sign and leading zeros ('' for zero)
_DIGITS = f"REGEXP_REPLACE({SEQUENCE_TEXT}, '^-?0*', '')"
VALID = (f"({_PS} IS NOT NULL OR ({_PID} IS NOT NULL AND {_SEQ} IS NOT NULL))\n"
         f"    AND REGEXP({SEQUENCE_TEXT}, '^-?[0-9]+\\z')\n"
         f"    AND ({_DIGITS} = '' OR (({SEQUENCE_TEXT}) NOT LIKE '-%' AND "
         f"CHAR_LENGTH({_DIGITS}) <= 19 AND "
         f"TRY_CAST({_DIGITS} AS DECIMAL(19, 0)) <= {h.MAX_SEQUENCE}))")
SEQUENCE = f"CASE WHEN {_DIGITS} = '' THEN 0 ELSE TRY_CAST({_DIGITS} AS BIGINT) END"

BATCH_PARTIALS = tuple(
    Partial(et, {"producer_id": Sql(PRODUCER), "seq": Sql(SEQUENCE), "copies": Const(1)},
            where=VALID) for et in EVENT_TYPES)

COLUMNS = (
    Column("producer_id", "TEXT", nullable=False),
    *(Column(name, "BIGINT") for name in ("records", "distinct_sequences", "min_seq",
                                          "max_seq", "gaps", "duplicates")),
)
_RANGES = "delivery_sequences"


def producers_view() -> FlinkView:
    """`DELIVERY_PRODUCERS`'s SQL over the merged `delivery_batch` as one-sequence ranges."""
    if f"FROM {_RANGES} " not in DELIVERY_PRODUCERS.sql:
        raise ValueError("delivery_producers no longer reads delivery_sequences")
    batch = merged_sql(DELIVERY_BATCH, BATCH_PARTIALS)
    ranges = (f"(SELECT `producer_id`, `seq` AS first_seq, `seq` AS last_seq, "
              f"`copies` AS records FROM (\n{batch}\n) AS `batch`) AS {_RANGES}")
    query = DELIVERY_PRODUCERS.sql.replace(f"FROM {_RANGES} ", f"FROM {ranges} ")
    return FlinkView(DELIVERY_PRODUCERS.name, COLUMNS, ("producer_id",), query,
                     f"`{DELIVERY_PRODUCERS.name}` view", (
                         "a producer id that is not valid UTF-8: the builder replaces each "
                         "bad byte sequence as Python does, Flink as Java does",))

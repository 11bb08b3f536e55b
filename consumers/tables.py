"""The tables the consumers build: each one's definition (columns, merge rules, docs).

Why declarative: every table is written by order-independent upserts. Each
column says how a new partial row merges into the stored one (`Merge`), and
the same rule is applied twice: in Python, to pre-merge the rows of one batch
(an `INSERT ... ON CONFLICT DO UPDATE` may not touch one row twice), and in
SQL, to merge the batch into the table. So any arrival order of a session's
events, across topics and batches, yields the same row.

The analysis engineer's reports read these tables by these names. Types are
portable between DuckDB and PostgreSQL; JSON is `JSON` in DuckDB and `JSONB`
in PostgreSQL.

Nullable keys: a whole-env session has no lane (`lane` NULL), but key columns
cannot be NULL, so keyed tables carry `lane_key = COALESCE(lane, -1)` in the
primary key next to the nullable `lane`.

The model (columns, merge rules, SQL rendering) is the package `table_model`, imported
from there; this module holds the definitions only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from rlmesh_stream.consumers.table_model import Column, Merge, Table, View

__all__ = [
    "ADVISORIES",
    "CONSUMER_OFFSETS",
    "DEAD_LETTERS",
    "DELIVERY_BATCH",
    "DELIVERY_MARKS",
    "DELIVERY_MARKS_FORGET_SQL",
    "DELIVERY_MERGE_SQL",
    "DELIVERY_PRODUCERS",
    "DELIVERY_SEQUENCES",
    "EPISODES",
    "EPISODE_SESSION_ENDS",
    "EPISODE_STATUSES",
    "INVALID_HEADERS",
    "LEGACY_DELIVERY_COLUMN",
    "LEGACY_DELIVERY_RANGES_SQL",
    "LEGACY_DELIVERY_SCRATCH",
    "OWNED_NAMES",
    "SESSIONS",
    "SESSION_STATUSES",
    "STEPS",
    "TABLES",
    "TABLES_BY_NAME",
    "TELEMETRY_ROLLUPS",
    "TELEMETRY_SESSIONS",
    "VIEWS",
    "is_consumers_own",
]

# --------------------------------------------------------------------------- tables


def _route(merge: Merge = Merge.FIRST, key: bool = False) -> tuple[Column, ...]:
    """The route columns every table slices by (`RuntimeEnvContext`)."""
    return (
        Column("env_id", "TEXT", merge, nullable=not key),
        Column("env_component_id", "TEXT", merge),
        Column("model_component_id", "TEXT", merge, nullable=not key),
        Column("lane", "BIGINT", merge, doc="NULL for a whole-env session"),
    )


EPISODE_STATUSES = ("running", "abandoned", "completed")  # lowest precedence first
SESSION_STATUSES = ("running", "ended", "failed")

EPISODES = Table(
    "episodes",
    (
        Column("session_id", "TEXT", nullable=False),
        Column("episode_record_id", "TEXT", nullable=False),
        Column("episode_id", "TEXT"),
        *_route(),
        Column("episode_index", "BIGINT"),
        Column("env_index", "BIGINT"),
        Column("seed", "BIGINT"),
        Column("trial_index", "BIGINT", doc="u64 in Rust; fits BIGINT below 2**63"),
        Column("started_from_auto_reset", "BOOLEAN"),
        Column("status", "TEXT", Merge.RANK, ranks=EPISODE_STATUSES,
               doc="completed > abandoned (its session ended or failed first) > running"),
        Column("step_count", "BIGINT"),
        Column("cumulative_reward", "DOUBLE"),
        Column("terminated", "BOOLEAN"),
        Column("truncated", "BOOLEAN"),
        Column("success", "BOOLEAN"),
        Column("duration_ms", "BIGINT"),
        Column("predict_ms", "DOUBLE"),
        Column("step_ms", "DOUBLE"),
        Column("final_info", "JSON", doc="MetaMap as JSON; bytes as base64 strings"),
        Column("started_at", "TIMESTAMPTZ", Merge.MIN, doc="episode_started record timestamp"),
        Column("completed_at", "TIMESTAMPTZ", Merge.MIN,
               doc="episode_completed record timestamp"),
    ),
    ("session_id", "episode_record_id"),
    "One row per episode, merged from episode_started and episode_completed in any order.",
)

EPISODE_SESSION_ENDS = Table(
    "episode_session_ends",
    (
        Column("session_id", "TEXT", nullable=False),
        Column("ended_at", "TIMESTAMPTZ", Merge.MIN),
        Column("status", "TEXT", Merge.RANK, ranks=SESSION_STATUSES),
        Column("total_episodes", "BIGINT", Merge.FOLLOWS, follows="status",
               doc="the episodes an ended session completed (session_ended's count); "
                   "NULL when it failed (or ended before this column was added)"),
    ),
    ("session_id",),
    "The episodes builder's own record of which sessions ended or failed, so an episode "
    "read after its session's end is still marked abandoned (no cross-builder reads), and "
    "of how many episodes an ended session completed, so a reader can tell when all of "
    "them are read (a session's end can be read before its last episodes' events).",
)

SESSIONS = Table(
    "sessions",
    (
        Column("session_id", "TEXT", nullable=False),
        *_route(),
        Column("status", "TEXT", Merge.RANK, ranks=SESSION_STATUSES,
               doc="failed > ended > running"),
        Column("reason", "TEXT", Merge.FOLLOWS, follows="status"),
        Column("total_steps", "BIGINT", Merge.FOLLOWS, follows="status"),
        Column("total_episodes", "BIGINT", Merge.FOLLOWS, follows="status"),
        Column("started_at", "TIMESTAMPTZ", Merge.MIN),
        Column("ended_at", "TIMESTAMPTZ", Merge.MIN),
        Column("env_connected_at", "TIMESTAMPTZ", Merge.MIN),
        Column("model_connected_at", "TIMESTAMPTZ", Merge.MIN),
    ),
    ("session_id",),
    "One row per session: route, lifecycle times, how it ended.",
)

ADVISORIES = Table(
    "advisories",
    (
        Column("session_id", "TEXT", nullable=False),
        Column("leg", "TEXT", nullable=False),
        Column("severity", "TEXT", nullable=False),
        Column("message", "TEXT", nullable=False),
        Column("count", "BIGINT", Merge.SUM),
        Column("first_seen", "TIMESTAMPTZ", Merge.MIN),
        Column("last_seen", "TIMESTAMPTZ", Merge.MAX),
        *_route(),
    ),
    ("session_id", "leg", "severity", "message"),
    "One row per distinct relay advisory of a session.",
)


def _ratio(num: str, den: str = "count") -> tuple[Callable[[Mapping[str, Any]], Any], str]:
    def derive(row: Mapping[str, Any]) -> Any:
        d = row.get(den) or 0
        return float(row[num]) / d if d and row[num] is not None else None

    return derive, f"CAST({{{num}}} AS DOUBLE PRECISION) / NULLIF({{{den}}}, 0)"


def _weighted(name: str, doc: str) -> tuple[Column, Column]:
    derive, derive_sql = _ratio(f"{name}_total")
    return (
        Column(f"{name}_total", "DECIMAL", Merge.SUM,
               doc=f"sum of count * {name}, each rounded to 1e-9 (internal)"),
        Column(name, "DOUBLE", Merge.DERIVED, derive=derive, derive_sql=derive_sql, doc=doc),
    )


TELEMETRY_ROLLUPS = Table(
    "telemetry_rollups",
    (
        Column("window_start", "TIMESTAMPTZ", nullable=False),
        Column("window_end", "TIMESTAMPTZ"),
        # no env_component_id: several components' rows share a rollup row, and keeping
        # whichever came first would make the row depend on arrival order
        *(c for c in _route(key=True) if c.name != "env_component_id"),
        Column("lane_key", "BIGINT", nullable=False, doc="COALESCE(lane, -1), for the key"),
        Column("op", "TEXT", nullable=False),
        Column("component", "TEXT", nullable=False),
        Column("metric", "TEXT", nullable=False),
        Column("kind", "TEXT"),
        Column("count", "BIGINT", Merge.SUM, doc="samples in the window (exact)"),
        Column("row_count", "BIGINT", Merge.SUM, doc="snapshot rows merged into this rollup"),
        *_weighted("avg", "count-weighted mean of the rows' avg: exact"),
        *_weighted("p50", "count-weighted mean of the rows' p50: an estimate"),
        *_weighted("p95", "count-weighted mean of the rows' p95: an estimate"),
        *_weighted("p99", "count-weighted mean of the rows' p99: an estimate"),
        Column("max_p99", "DOUBLE", Merge.MAX, doc="largest row p99: an upper bound of p99"),
    ),
    ("window_start", "env_id", "model_component_id", "lane_key", "op", "component", "metric"),
    "Window telemetry per tumbling window (by record timestamp) and route/op/component/metric. "
    "Percentile estimator: the count-weighted mean of the rows' percentiles. The q-quantile "
    "of a mixture always lies between the smallest and the largest of its parts' "
    "q-quantiles, so the estimate's error is at most (max - min) of the merged rows' "
    "percentiles, plus each row's own reservoir-sampling error; it is exact when one row "
    "makes the window. max_p99 is an upper bound of the window's true p99 (up to sampling).",
)

TELEMETRY_SESSIONS = Table(
    "telemetry_sessions",
    (
        Column("session_id", "TEXT", nullable=False),
        Column("op", "TEXT", nullable=False),
        Column("component", "TEXT", nullable=False),
        Column("metric", "TEXT", nullable=False),
        Column("kind", "TEXT", Merge.LAST),
        Column("count", "BIGINT", Merge.LAST),
        Column("avg", "DOUBLE", Merge.LAST),
        Column("p50", "DOUBLE", Merge.LAST),
        Column("p95", "DOUBLE", Merge.LAST),
        Column("p99", "DOUBLE", Merge.LAST),
        *_route(),
    ),
    ("session_id", "op", "component", "metric"),
    "The exact Session-horizon snapshot rows, one per session and op/component/metric.",
)

STEPS = Table(
    "steps",
    (
        Column("session_id", "TEXT", nullable=False),
        Column("step_offset", "BIGINT", nullable=False,
               doc="the step_completed record's offset: identifies the group step, since "
                   "`step` is the primary lane's episode step and repeats within a session"),
        Column("slot", "INTEGER", nullable=False, doc="position in the step's per-lane vectors"),
        Column("step", "BIGINT", doc="the primary lane's step, as the event carries it"),
        Column("episode_record_id", "TEXT",
               doc="the primary slot's episode only: step_completed names no other lane's"),
        *_route(),
        Column("reward", "DOUBLE"),
        Column("terminated", "BOOLEAN"),
        Column("truncated", "BOOLEAN"),
        Column("autoreset_roll", "BOOLEAN"),
        Column("predict_ms", "DOUBLE"),
        Column("step_ms", "DOUBLE"),
        Column("completed_at", "TIMESTAMPTZ", Merge.MIN),
    ),
    ("session_id", "step_offset", "slot"),
    "Optional (off by default): one row per lane of each step_completed event.",
)

DELIVERY_SEQUENCES = Table(
    "delivery_sequences",
    (
        Column("producer_id", "TEXT", nullable=False),
        Column("first_seq", "BIGINT", nullable=False),
        Column("last_seq", "BIGINT", nullable=False),
        Column("records", "BIGINT", doc="records read with a sequence in the range"),
    ),
    ("producer_id", "first_seq"),
    "Every producer sequence number seen, as contiguous ranges [first_seq, last_seq] per "
    "producer (disjoint, never adjacent), with how many records they hold: storage grows "
    "with the gaps, not the events. A record whose sequence falls in a stored range is a "
    "duplicate; the space between ranges are gaps. Shared by all consumer processes, so "
    "gaps are computed over the whole fleet's topics, not one process's share. Written by "
    "`DELIVERY_MERGE_SQL` from the batch's `delivery_batch` rows, in the batch's transaction.",
    conflict_target=True,
)

DELIVERY_BATCH = Table(
    "delivery_batch",
    (
        Column("producer_id", "TEXT", nullable=False),
        Column("seq", "BIGINT", nullable=False),
        Column("copies", "BIGINT", Merge.SUM, doc="records of the batch with this sequence"),
    ),
    ("producer_id", "seq"),
    "One checkpoint's sequences (staged only, no table of its own): merged into "
    "`delivery_sequences` by `DELIVERY_MERGE_SQL`.",
    stage_only=True,
)

_TOUCHED = "producer_id IN (SELECT producer_id FROM {stage:delivery_batch})"

INVALID_HEADERS = Table(
    "invalid_headers",
    (
        Column("topic", "TEXT", nullable=False),
        Column("partition_id", "INTEGER", nullable=False),
        Column("record_offset", "BIGINT", nullable=False),
        Column("header", "TEXT", nullable=False),
        Column("producer_id", "TEXT"),
        Column("header_value", "TEXT", doc="as read (UTF-8, invalid bytes replaced)"),
        Column("reason", "TEXT"),
        Column("record_time", "TIMESTAMPTZ", Merge.MIN),
    ),
    ("topic", "partition_id", "record_offset", "header"),
    "Records whose delivery headers cannot be used (a `rlmesh.seq` that is not a decimal "
    "number in [0, MAX_SEQUENCE]): left out of `delivery_sequences`, so they can neither "
    "stop ingestion nor hide or invent a gap, and counted here by `report delivery`. The "
    "record itself is applied by the other builders as usual.",
)

DELIVERY_MERGE_SQL: tuple[str, ...] = (
    # 1. the islands of (the touched producers' stored ranges + the batch's sequences) that
    # hold a sequence of the batch, written over the range each one starts at
    "INSERT INTO delivery_sequences (producer_id, first_seq, last_seq, records)\n"
    "SELECT producer_id, MIN(first_seq), MAX(last_seq), SUM(records) FROM (\n"
    # Both windows must order rows alike, ties included: (first_seq, last_seq, fresh) is
    # unique per producer (stored ranges are disjoint, the batch's sequences distinct).
    "  SELECT *, SUM(starts) OVER (PARTITION BY producer_id ORDER BY first_seq, last_seq, fresh\n"
    "                              ROWS UNBOUNDED PRECEDING) AS island FROM (\n"
    "    SELECT *, CASE WHEN first_seq <= 1 + MAX(last_seq) OVER (\n"
    "        PARTITION BY producer_id ORDER BY first_seq, last_seq, fresh\n"
    "        ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) THEN 0 ELSE 1 END AS starts\n"
    "    FROM (\n"
    "      SELECT producer_id, first_seq, last_seq, records, 0 AS fresh\n"
    f"      FROM delivery_sequences WHERE {_TOUCHED}\n"
    "      UNION ALL\n"
    "      SELECT producer_id, seq, seq, copies, 1 FROM {stage:delivery_batch}\n"
    "    ) AS items\n"
    "  ) AS marked\n"
    ") AS numbered\n"
    "GROUP BY producer_id, island HAVING MAX(fresh) = 1\n"
    "ON CONFLICT (producer_id, first_seq) DO UPDATE SET\n"
    "  last_seq = excluded.last_seq, records = excluded.records",
    # 2. the stored ranges an island of step 1 now covers
    "DELETE FROM delivery_sequences USING (\n"
    "  SELECT producer_id, first_seq FROM (\n"
    "    SELECT producer_id, first_seq, MAX(last_seq) OVER (\n"
    "        PARTITION BY producer_id ORDER BY first_seq\n"
    "        ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS reach\n"
    f"    FROM delivery_sequences WHERE {_TOUCHED}\n"
    "  ) AS w WHERE first_seq <= reach\n"
    ") AS covered\n"
    "WHERE delivery_sequences.producer_id = covered.producer_id\n"
    "  AND delivery_sequences.first_seq = covered.first_seq",
)

# Migration: a `delivery_sequences` of one row per sequence (producer_id, seq, copies,
# first_topic), as written before ranges, folded into its ranges.
LEGACY_DELIVERY_COLUMN = "seq"
LEGACY_DELIVERY_SCRATCH = "delivery_sequences_migrating"  # the ranges, while the table is redone
LEGACY_DELIVERY_RANGES_SQL = (
    f"CREATE TABLE {LEGACY_DELIVERY_SCRATCH} AS\n"
    "SELECT producer_id, MIN(seq) AS first_seq, MAX(seq) AS last_seq, SUM(copies) AS records\n"
    "FROM (SELECT producer_id, seq, copies,\n"
    "             seq - ROW_NUMBER() OVER (PARTITION BY producer_id ORDER BY seq) AS island\n"
    "      FROM delivery_sequences) AS s\n"
    "GROUP BY producer_id, island"
)

DELIVERY_PRODUCERS = View(
    "delivery_producers",
    "SELECT producer_id,\n"
    "  SUM(records) AS records,\n"
    "  CAST(SUM(last_seq - first_seq + 1) AS BIGINT) AS distinct_sequences,\n"
    "  MIN(first_seq) AS min_seq,\n"
    "  MAX(last_seq) AS max_seq,\n"
    "  MAX(last_seq) + 1 - CAST(SUM(last_seq - first_seq + 1) AS BIGINT) AS gaps,\n"
    "  SUM(records) - CAST(SUM(last_seq - first_seq + 1) AS BIGINT) AS duplicates\n"
    "FROM delivery_sequences GROUP BY producer_id",
    "Per producer id: records read, sequence gaps (sequences start at 0, so missing "
    "numbers below max_seq: the space before and between its ranges) and duplicate records "
    "(records beyond one per distinct sequence).",
)

DELIVERY_MARKS = Table(
    "delivery_marks",
    (
        Column("builder", "TEXT", nullable=False),
        Column("topic", "TEXT", nullable=False),
        Column("partition_id", "INTEGER", nullable=False),
        Column("producer_id", "TEXT", nullable=False),
        Column("high_seq", "BIGINT", Merge.LAST, doc="the highest sequence read"),
        Column("last_offset", "BIGINT", Merge.LAST,
               doc="the offset of the producer's last record read in the partition"),
        Column("recent", "TEXT", Merge.LAST,
               doc="the newest sequences read (at most 32), as distances below high_seq"),
        Column("forgotten", "BOOLEAN", Merge.LAST,
               doc="evicted (a partition keeps 4096 producers): deleted by the batch"),
    ),
    ("builder", "topic", "partition_id", "producer_id"),
    "Per builder, partition and producer: what tells a re-delivered record (the same "
    "producer id and sequence read again) from a new one, so that builders drop it "
    "(`consumers/runtime/redelivery.py`). As of the builder's stored offset of the "
    "partition: written in the checkpoint's transaction, loaded with the offsets.",
)

# The marks a batch forgot (a partition past its producer cap): deleted, not kept.
DELIVERY_MARKS_FORGET_SQL = (
    "DELETE FROM delivery_marks WHERE forgotten AND EXISTS (SELECT 1 FROM "
    "{stage:delivery_marks} AS s WHERE s.forgotten)")

DEAD_LETTERS = Table(
    "dead_letters",
    (
        Column("topic", "TEXT", nullable=False),
        Column("partition_id", "INTEGER", nullable=False),
        Column("record_offset", "BIGINT", nullable=False),
        Column("builder", "TEXT"),
        Column("error", "TEXT"),
        Column("seen_at", "TIMESTAMPTZ", Merge.MIN),
        Column("dead_letter_topic", "TEXT", Merge.LAST,
               doc="the topic holding the record's copy; NULL when that topic refused it "
                   "for good (too large for it, say): then `error` ends with why, and "
                   "the record is only in its source topic, at its offset"),
    ),
    ("topic", "partition_id", "record_offset"),
    "Records no builder can apply: undecodable, or of another event type than their "
    "topic's (each also copied to the dead-letter topic when it takes it).",
)

CONSUMER_OFFSETS = Table(
    "consumer_offsets",
    (
        Column("builder", "TEXT", nullable=False),
        Column("topic", "TEXT", nullable=False),
        Column("partition_id", "INTEGER", nullable=False),
        Column("next_offset", "BIGINT", Merge.LAST, nullable=False),
        Column("group_id", "TEXT", Merge.LAST),
        Column("updated_at", "TIMESTAMPTZ", Merge.LAST),
        Column("written_by", "TEXT", Merge.LAST, doc="host:pid of the last writing process"),
    ),
    ("builder", "topic", "partition_id"),
    "The next offset each builder applies per partition, written in the same transaction "
    "as the rows: the source of truth for where to resume (Kafka commits are for lag tools).",
    conflict_target=True,
)

TABLES: tuple[Table, ...] = (
    EPISODES, EPISODE_SESSION_ENDS, SESSIONS, ADVISORIES, TELEMETRY_ROLLUPS,
    TELEMETRY_SESSIONS, STEPS, DELIVERY_SEQUENCES, INVALID_HEADERS, DELIVERY_MARKS,
    DEAD_LETTERS, CONSUMER_OFFSETS,
)
VIEWS: tuple[View, ...] = (DELIVERY_PRODUCERS,)
TABLES_BY_NAME: dict[str, Table] = {t.name: t for t in TABLES}
OWNED_NAMES: frozenset[str] = frozenset(
    [*(t.name for t in TABLES), DELIVERY_BATCH.name, *(v.name for v in VIEWS),
     LEGACY_DELIVERY_SCRATCH])
"""Every relation the consumers create (tables, views, the staged batch, the migration's
scratch table): names nothing else may write, in lower case."""


def is_consumers_own(name: str) -> bool:
    """Whether `name` is a consumers' relation in any letter case (DuckDB identifiers and
    PostgreSQL's unquoted ones fold case), so no other writer may replace it."""
    return name.lower() in OWNED_NAMES

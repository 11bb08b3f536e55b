"""Closing a test's hook with everything it accepted delivered.

Tests that compare what the consumers built with what a fleet published need every
accepted event in Kafka first: `KafkaRuntimeHooks.close()`'s default budget (10 s) can
run out on a loaded machine while schemas are still being registered, and what it then
leaves undelivered would show up later as rows missing for no visible reason.
"""

from __future__ import annotations

from rlmesh_stream.producer.delivery import Stats
from rlmesh_stream.producer.hooks import KafkaRuntimeHooks


def close_delivered(hooks: KafkaRuntimeHooks, timeout: float = 120.0) -> Stats:
    """Close `hooks`, waiting up to `timeout` s; fail unless every accepted event was
    delivered."""
    stats = hooks.close(timeout)
    assert stats.delivered == stats.accepted and not stats.failed_total, (
        f"the hook did not deliver everything it accepted: {stats}")
    return stats

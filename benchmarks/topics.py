"""A benchmark's topics removed when it ends (every partition keeps files open in the
broker). Run from benchmarks/ (a script's folder is first on its path), so the scripts
import it by its bare name."""

from __future__ import annotations

import contextlib

from confluent_kafka.admin import AdminClient

from rlmesh_stream.schemas.connection.config import StreamConfig


def delete_topics(config: StreamConfig) -> None:
    """Best effort: every topic under `config`'s prefix."""
    admin = AdminClient({**config.kafka_config(), "log_level": 0})
    with contextlib.suppress(Exception):
        names = [t for t in admin.list_topics(timeout=5).topics
                 if t.startswith(config.topic_prefix)]
        for future in admin.delete_topics(names, operation_timeout=10).values():
            with contextlib.suppress(Exception):
                future.result(timeout=15)

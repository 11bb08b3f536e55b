"""Clear errors when Kafka refuses our credentials or our rights.

librdkafka reports "Topic authorization failed" or "SASL authentication
error: ... invalid credentials" without saying *who* was refused *what*; on a
cluster shared with other teams that is the first thing an operator needs.
These helpers name the principal (the SASL user name, never its password) and
the resource, and say what to do. They live in `schemas` because the
producer hook, the consumers and the CLIs all report them.
"""

from __future__ import annotations

import logging
import threading
import time

from confluent_kafka import KafkaError

from schemas.config import StreamConfig

AUTHENTICATION_CODES: frozenset[int] = frozenset({
    KafkaError._AUTHENTICATION,
    KafkaError.SASL_AUTHENTICATION_FAILED,
})
AUTHORIZATION_CODES: frozenset[int] = frozenset({
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.GROUP_AUTHORIZATION_FAILED,
    KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
})


class AccessDeniedError(PermissionError):
    """Kafka refused this principal's credentials or an operation on a resource."""


def principal(config: StreamConfig) -> str:
    """The Kafka principal a client with this config presents."""
    if config.sasl_username:
        return f"User:{config.sasl_username}"
    return "User:ANONYMOUS (no SASL user configured)"


def kafka_access_message(
    config: StreamConfig, err: KafkaError, *, operation: str = "use",
    topic: str | None = None, group: str | None = None,
) -> str | None:
    """A one-line explanation if `err` is an authentication or authorization error, else None."""
    code = err.code()
    who = principal(config)
    if code in AUTHENTICATION_CODES:
        return (f"Kafka at {config.bootstrap} rejected the credentials of {who} "
                f"({config.sasl_mechanism or 'no SASL mechanism'}): check the user name and "
                f"password (RLMESH_STREAM_SASL_USERNAME / RLMESH_STREAM_SASL_PASSWORD) "
                f"[{err.name()}]")
    if code not in AUTHORIZATION_CODES:
        return None
    if code == KafkaError.GROUP_AUTHORIZATION_FAILED:
        resource = f"consumer group {group!r}" if group else "its consumer group"
    elif code == KafkaError.CLUSTER_AUTHORIZATION_FAILED:
        resource = "the cluster"
    elif code == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
        resource = "its transactional id"
    else:
        resource = f"topic {topic!r}" if topic else "a topic"
    return (f"Kafka at {config.bootstrap} denied {who} permission to {operation} {resource} "
            f"[{err.name()}]: ask the cluster's administrator for that ACL, or use a "
            f"principal that has it")


class RateLimitedLog:
    """Log a repeated message at most once per `every` seconds (reconnects repeat errors)."""

    def __init__(self, every: float = 30.0) -> None:
        self.every = every
        self._last: dict[str, float] = {}
        self._lock = threading.Lock()

    def error(self, logger: logging.Logger, message: str) -> None:
        now = time.monotonic()
        with self._lock:
            if now - self._last.get(message, -self.every) < self.every:
                return
            self._last[message] = now
        logger.error("rlmesh-stream: %s", message)

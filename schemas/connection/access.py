"""Clear errors when Kafka refuses our credentials or our rights.

librdkafka reports "Topic authorization failed" or "SASL authentication
error: ... invalid credentials" without saying *who* was refused *what*; on a
cluster shared with other teams that is the first thing an operator needs.
These helpers name the principal (the SASL or registry user name, never its
password) and the resource, and say what to do. They live in `schemas` because the
producer hook, the consumers and the CLIs all report them.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from confluent_kafka import KafkaError

from rlmesh_stream.schemas.connection.config import StreamConfig
from rlmesh_stream.schemas.connection.redact import (  # redact_url: re-exported, the producer's
    redact_secrets,
    redact_url,  # noqa: F401
)
from rlmesh_stream.schemas.errors import RlmeshStreamError

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


class AccessDeniedError(RlmeshStreamError, PermissionError):
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
        mismatch = _sasl_mismatch(config, str(err.str()))
        if mismatch is not None:
            return mismatch
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


def _sasl_mismatch(config: StreamConfig, text: str) -> str | None:
    """An authentication error that is not about the credentials: the broker's listener
    speaks no SASL (it offers no mechanism) or not the mechanism configured."""
    marker = "supported mechanisms:"
    if "mechanism handshake failed" not in text or marker not in text:
        return None
    offered = text.split(marker, 1)[1].split("(after", 1)[0].strip()
    if not offered:
        return (f"Kafka at {config.bootstrap} offers no SASL mechanism on this listener: it "
                f"does not speak {config.security_protocol}; check --security-protocol / "
                "RLMESH_STREAM_SECURITY_PROTOCOL (the listener may be PLAINTEXT or SSL)")
    return (f"Kafka at {config.bootstrap} does not enable SASL mechanism "
            f"{config.sasl_mechanism} on this listener (it offers {offered}): check "
            "--sasl-mechanism / RLMESH_STREAM_SASL_MECHANISM")


class RateLimitedLog:
    """Log a repeated message at most once per `every` seconds (reconnects repeat errors)."""

    def __init__(self, every: float = 30.0) -> None:
        self.every = every
        self._last: dict[str, float] = {}
        self._lock = threading.Lock()

    def error(self, logger: logging.Logger, message: str) -> None:
        if self._due(message):
            logger.error("rlmesh-stream: %s", message)

    def warning(self, logger: logging.Logger, message: str, key: str | None = None) -> None:
        """Log at WARNING, at most once per `every` seconds per `key` (default: message)."""
        if self._due(message if key is None else key):
            logger.warning("%s", message)

    def _due(self, key: str) -> bool:
        now = time.monotonic()
        with self._lock:
            if now - self._last.get(key, -self.every) < self.every:
                return False
            self._last[key] = now
        return True


def registry_refusal(exc: BaseException) -> Any:
    """The registry's 401/403 answer behind `exc` (itself, or what it was raised from)."""
    # imported here: the registry client's HTTP module is not on a consumer's start-up path
    from rlmesh_stream.schemas.registry.client import registry_errors

    seen: BaseException | None = exc
    for _ in range(5):
        if seen is None:
            return None
        if (isinstance(seen, registry_errors())
                and getattr(seen, "http_status_code", None) in (401, 403)):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def registry_access_message(config: StreamConfig, refused: Any,
                            request: str) -> str:
    """One line for a registry 401/403: who was refused `request`, and what to do."""
    user = (f"registry user {config.registry_username!r}" if config.registry_username
            else "no registry user (RLMESH_STREAM_REGISTRY_USERNAME is not set)")
    if refused.http_status_code == 401:
        why = (f"authentication failed for {user}: check the user name and password "
               f"(RLMESH_STREAM_REGISTRY_USERNAME / RLMESH_STREAM_REGISTRY_PASSWORD)")
    else:
        why = (f"{user} is not authorised to make it: ask the registry's administrator "
               f"for that permission, or use a user that has it")
    said = str(refused)
    if config.registry_password:
        said = said.replace(config.registry_password, "***")
    return redact_secrets(f"schema registry at {config.registry_url} refused {request} "
                          f"(HTTP {refused.http_status_code}): {why} [{said}]",
                          config.registry_url)

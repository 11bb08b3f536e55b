"""Talking to the Confluent-API schema registry: errors mapped to the contract's.

A registry that cannot be reached (connection refused, timeout, 5xx) is
`RegistryUnavailableError`, which callers retry; a 404 is an answer, mapped by
the caller to what it means there (unknown id, unregistered subject).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

from confluent_kafka.schema_registry.error import SchemaRegistryError

from rlmesh_stream.schemas.errors import RegistryProtocolError, RegistryUnavailableError

T = TypeVar("T")


def _transport_errors() -> tuple[type[BaseException], ...]:
    errors: list[type[BaseException]] = [OSError, TimeoutError]
    for module in ("httpx2", "httpx", "requests"):
        try:
            mod = __import__(module)
        except ImportError:
            continue
        for name in ("TransportError", "RequestException", "TimeoutException"):
            cls = getattr(mod, name, None)
            if isinstance(cls, type) and issubclass(cls, BaseException):
                errors.append(cls)
    return tuple(errors)


TRANSPORT_ERRORS = _transport_errors()


def is_not_found(exc: SchemaRegistryError) -> bool:
    return exc.http_status_code == 404


def call(what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run one registry call; unreachable registry -> RegistryUnavailableError, a server
    that is not a registry -> RegistryProtocolError."""
    try:
        return fn(*args, **kwargs)
    except SchemaRegistryError as exc:
        if exc.http_status_code is None or exc.http_status_code >= 500 or exc.http_status_code in (
            408, 429,
        ):
            raise RegistryUnavailableError(f"schema registry failed to {what}: {exc}") from exc
        if exc.http_status_code == 404 and exc.error_code in (None, -1):
            # a registry's own 404s carry an error code (40401 subject, 40403 schema...)
            raise RegistryProtocolError(
                f"no schema registry API at the registry URL (HTTP 404 without a registry "
                f"error code, to {what}): check the path of --registry-url / "
                "RLMESH_STREAM_REGISTRY_URL (Apicurio: http://host:port/apis/ccompat/v7)"
            ) from exc
        raise
    except json.JSONDecodeError as exc:
        raise RegistryProtocolError(
            f"the server at the registry URL answered {what} with something other than "
            "JSON (an HTML page?): check --registry-url / RLMESH_STREAM_REGISTRY_URL points "
            "at a Confluent-API schema registry") from exc
    except TRANSPORT_ERRORS as exc:
        raise RegistryUnavailableError(
            f"schema registry unreachable ({what}): {exc!r}") from exc

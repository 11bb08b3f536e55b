"""Talking to the Confluent-API schema registry: errors mapped to the contract's.

A registry that cannot be reached (connection refused, timeout, 5xx) is
`RegistryUnavailableError`, which callers retry; a 404 is an answer, mapped by
the caller to what it means there (unknown id, unregistered subject).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any, TypeVar

from rlmesh_stream.schemas.contract.errors import RegistryProtocolError, RegistryUnavailableError
from rlmesh_stream.schemas.registry.http import RegistryHttpError

T = TypeVar("T")


def _loaded(module: str, *names: str) -> list[type[BaseException]]:
    """Exception classes of a module already imported (its errors cannot be raised
    otherwise, and importing the registry client's HTTP stack costs a consumer ~0.5 s)."""
    mod = sys.modules.get(module)
    found = (getattr(mod, name, None) for name in names)
    return [c for c in found if isinstance(c, type) and issubclass(c, BaseException)]


def registry_errors() -> tuple[type[BaseException], ...]:
    """The registry's error answers: ours (`registry_http`) and the confluent client's."""
    return (RegistryHttpError,
            *_loaded("confluent_kafka.schema_registry.error", "SchemaRegistryError"))


def transport_errors() -> tuple[type[BaseException], ...]:
    errors: list[type[BaseException]] = [OSError, TimeoutError]
    for module in ("httpx2", "httpx", "requests"):
        errors += _loaded(module, "TransportError", "RequestException", "TimeoutException")
    return tuple(errors)


def is_not_found(exc: Any) -> bool:
    return exc.http_status_code == 404  # type: ignore[no-any-return]


def call(what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run one registry call; unreachable registry -> RegistryUnavailableError, a server
    that is not a registry -> RegistryProtocolError."""
    try:
        return fn(*args, **kwargs)
    except registry_errors() as error:
        exc: Any = error  # RegistryHttpError or SchemaRegistryError: the same two fields
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
    except transport_errors() as exc:
        raise RegistryUnavailableError(
            f"schema registry unreachable ({what}): {exc!r}") from exc

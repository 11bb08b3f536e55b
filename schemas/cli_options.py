"""The connection options every CLI command that talks to the stack takes."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import click

from rlmesh_stream.schemas.config import (
    DEFAULT_BOOTSTRAP,
    DEFAULT_REGISTRY_TIMEOUT,
    DEFAULT_REGISTRY_URL,
    DEFAULT_TOPIC_PREFIX,
    StreamConfig,
)
from rlmesh_stream.schemas.redact import redact_url

_OPTIONS: list[tuple[str, str, Any, str]] = [
    # (flag, env var, shown default, help)
    ("--bootstrap", "RLMESH_STREAM_BOOTSTRAP", DEFAULT_BOOTSTRAP, "Kafka bootstrap servers."),
    ("--registry-url", "RLMESH_STREAM_REGISTRY_URL", DEFAULT_REGISTRY_URL,
     "Confluent-API schema registry URL."),
    ("--topic-prefix", "RLMESH_STREAM_TOPIC_PREFIX", DEFAULT_TOPIC_PREFIX,
     "Prefix of the event topics."),
    ("--security-protocol", "RLMESH_STREAM_SECURITY_PROTOCOL", None,
     "Kafka security.protocol (e.g. SASL_SSL)."),
    ("--sasl-mechanism", "RLMESH_STREAM_SASL_MECHANISM", None, "e.g. SCRAM-SHA-512."),
    ("--sasl-username", "RLMESH_STREAM_SASL_USERNAME", None, "SASL user name."),
    ("--sasl-password", "RLMESH_STREAM_SASL_PASSWORD", None,
     "SASL password (prefer the environment variable)."),
    ("--ssl-ca-location", "RLMESH_STREAM_SSL_CA_LOCATION", None, "CA file for TLS."),
    ("--registry-username", "RLMESH_STREAM_REGISTRY_USERNAME", None, "Registry user."),
    ("--registry-password", "RLMESH_STREAM_REGISTRY_PASSWORD", None,
     "Registry password (prefer the environment variable)."),
    ("--registry-ca-location", "RLMESH_STREAM_REGISTRY_CA_LOCATION", None,
     "CA file for the registry's TLS."),
    ("--registry-timeout", "RLMESH_STREAM_REGISTRY_TIMEOUT", DEFAULT_REGISTRY_TIMEOUT,
     "Seconds one schema registry request may take."),
]


def _check_registry_url(url: str) -> None:
    """An http(s) URL with a host, named (password redacted) when it is not one."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise click.BadParameter(
            f"{redact_url(url)!r} is not an http:// or https:// URL with a host",
            param_hint="'--registry-url'")


def stream_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Add the connection options and pass them on as one `config: StreamConfig`.

    Defaults are shown but never secrets: password options show no default.
    """

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        values = {flag[2:].replace("-", "_"): kwargs.pop(flag[2:].replace("-", "_"))
                  for flag, *_ in _OPTIONS}
        _check_registry_url(values["registry_url"])
        kwargs["config"] = StreamConfig.from_env(env={}, **values)
        return func(*args, **kwargs)

    for flag, envvar, default, help_text in reversed(_OPTIONS):
        wrapper = click.option(
            flag,
            envvar=envvar,
            default=default,
            type=click.FloatRange(min=0, min_open=True) if isinstance(default, float) else None,
            show_default=default is not None,
            show_envvar=True,
            help=help_text,
        )(wrapper)
    return wrapper

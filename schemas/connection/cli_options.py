"""The connection options every CLI command that talks to the stack takes.

Each is checked when the command line is parsed (a registry URL without a scheme, a
topic prefix Kafka cannot name topics with, a security protocol librdkafka does not
know): one `Error:` line naming the option, before any connection is tried.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import click

from rlmesh_stream.schemas.connection.config import (
    DEFAULT_BOOTSTRAP,
    DEFAULT_REGISTRY_TIMEOUT,
    DEFAULT_REGISTRY_URL,
    DEFAULT_TOPIC_PREFIX,
    StreamConfig,
)
from rlmesh_stream.schemas.connection.redact import redact_url
from rlmesh_stream.schemas.contract.topics import check_topic_name, check_topic_prefix

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")  # librdkafka's


def _check(check: Callable[[str], object]) -> Callable[[click.Context, click.Parameter, Any],
                                                        Any]:
    """A click callback running `check` on a given value; its ValueError is a bad parameter."""
    def callback(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        if value is None:
            return value
        try:
            check(value)
        except ValueError as exc:
            raise click.BadParameter(str(exc), ctx=ctx, param=param) from None
        return value
    return callback


def check_registry_url(url: str) -> str:
    """`url` if each of its comma-separated URLs is http(s)://host[:port][/path]."""
    for one in url.split(","):
        parts = urlsplit(one.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{redact_url(one.strip())!r} is not an http:// or https:// URL "
                             "with a host (e.g. http://127.0.0.1:8081/apis/ccompat/v7)")
        try:
            parts.port  # noqa: B018 - raises ValueError for a port outside 0..65535
        except ValueError:
            raise ValueError(f"{redact_url(one.strip())!r} has an invalid port") from None
    return url


# A click callback for an option naming one Kafka topic (e.g. --dlq-topic).
topic_name_callback = _check(check_topic_name)


# Per option: the click type or a check of the given value (ValueError: a bad parameter).
_VALIDATION: dict[str, dict[str, Any]] = {
    "--registry-url": {"callback": _check(check_registry_url)},
    "--topic-prefix": {"callback": _check(check_topic_prefix)},
    "--security-protocol": {"type": click.Choice(SECURITY_PROTOCOLS, case_sensitive=False),
                            "callback": lambda _c, _p, v: v.upper() if v else v},
}

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


def stream_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Add the connection options and pass them on as one `config: StreamConfig`.

    Defaults are shown but never secrets: password options show no default.
    """

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        values = {flag[2:].replace("-", "_"): kwargs.pop(flag[2:].replace("-", "_"))
                  for flag, *_ in _OPTIONS}
        kwargs["config"] = StreamConfig.from_env(env={}, **values)
        return func(*args, **kwargs)

    for flag, envvar, default, help_text in reversed(_OPTIONS):
        checks = {"type": click.FloatRange(min=0, min_open=True)
                  if isinstance(default, float) else None, **_VALIDATION.get(flag, {})}
        wrapper = click.option(
            flag,
            envvar=envvar,
            default=default,
            show_default=default is not None,
            show_envvar=True,
            help=help_text,
            **checks,
        )(wrapper)
    return wrapper

"""The connection options every CLI command that talks to the stack takes.

Each is checked when the command line is parsed (a registry URL without a scheme, a
topic prefix Kafka cannot name topics with, a security protocol or SASL mechanism
librdkafka does not know, bootstrap servers that are not host:port, and what any text
must be: `schemas.cli_values.Text`): one `Error:` line naming the option, before any
connection is tried. A password's value is never quoted.
"""

from __future__ import annotations

import dataclasses
import functools
import ipaddress
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import click

from rlmesh_stream.schemas.cli_values import (
    NON_NEGATIVE,
    POSITIVE,
    FiniteFloatRange,
    PathValue,
    Text,
    shown,
)
from rlmesh_stream.schemas.connection.config import (
    ENV_PREFIX,
    StreamConfig,
)
from rlmesh_stream.schemas.connection.redact import redact_url
from rlmesh_stream.schemas.contract.topics import check_topic_name, check_topic_prefix

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")  # librdkafka's
SASL_MECHANISMS = ("GSSAPI", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
MAX_HOST_CHARS = 253  # a DNS name
# one bootstrap server as librdkafka takes it: [PROTOCOL://]host[:port], an IPv6 host in []
_SERVER = re.compile(r"(?:[A-Za-z_]+://)?(\[[0-9A-Fa-f:.]+\]|[^:\[\]/\s]+)(?::([0-9]+))?")

__all__ = ["NON_NEGATIVE", "POSITIVE", "FiniteFloatRange", "stream_options"]


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


def check_bootstrap(servers: str) -> str:
    """`servers` if each comma-separated entry is [PROTOCOL://]host[:port] (port 1-65535)."""
    for one in servers.split(","):
        entry = one.strip()
        match = _SERVER.fullmatch(entry)
        bare_ipv6 = match is None and _is_ip(entry.split("://")[-1])
        if not bare_ipv6 and (match is None or len(match.group(1)) > MAX_HOST_CHARS):
            raise ValueError(f"{shown(entry)} is not host:port (e.g. 127.0.0.1:9092; "
                             "several separated by commas)")
        port = match.group(2) if match is not None else None
        if port is not None and not 1 <= int(port) <= 65535:
            raise ValueError(f"{shown(entry)} has port {port}, outside 1-65535")
    return servers


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


# A click callback for an option naming one Kafka topic (e.g. --dlq-topic).
topic_name_callback = _check(check_topic_name)


class SharedOption(click.Option):
    """An option of a group several commands share (how to read the stream, how to reach
    the stack). `--help` lists a command's own options first, then these groups in
    `group_rank` order: the connection options (15 of them) last, since they are set once
    in the environment, never looked for in a command's help."""

    group_rank = 1


class ConnectionOption(SharedOption):
    group_rank = 2


def shared_options_last(func: Callable[..., Any]) -> Callable[..., Any]:
    """Order `func`'s click options so the shared groups list after its own, whatever the
    order of its decorators (click lists them top decorator first: its pending list is in
    the opposite order, so the groups go to its front, highest rank first)."""
    pending: list[click.Parameter] = getattr(func, "__click_params__", [])
    pending.sort(key=lambda param: -getattr(param, "group_rank", 0))  # stable: keeps each
    return func                                                       # group's own order


# One line per connection option: the `StreamConfig` field it sets, its help and its check
# (a click type or callback). The flag (`--registry-url`), the environment variable
# (`RLMESH_STREAM_REGISTRY_URL`) and the default all come from the field, so nothing about an
# option is written twice.
_UPPER = {"callback": lambda _c, _p, v: v.upper() if v else v}
_OPTIONS: dict[str, dict[str, Any]] = {
    "bootstrap": {"help": "Kafka bootstrap servers.", "type": Text(check=check_bootstrap)},
    "registry_url": {"help": "Confluent-API schema registry URL.", "type": Text(),
                     "callback": _check(check_registry_url)},
    "topic_prefix": {"help": "Prefix of the event topics.", "type": Text(),
                     "callback": _check(check_topic_prefix)},
    "security_protocol": {"help": "Kafka security.protocol (e.g. SASL_SSL).",
                          "type": click.Choice(SECURITY_PROTOCOLS, case_sensitive=False),
                          **_UPPER},
    "sasl_mechanism": {"help": "e.g. SCRAM-SHA-512.",
                       "type": click.Choice(SASL_MECHANISMS, case_sensitive=False), **_UPPER},
    "sasl_username": {"help": "SASL user name.", "type": Text()},
    "sasl_password": {"help": "SASL password (prefer the environment variable).",
                      "type": Text(secret=True)},
    # librdkafka also takes "probe" (the system's CA store): not checked as a path
    "ssl_ca_location": {"help": "CA file for TLS.", "type": Text()},
    "registry_username": {"help": "Registry user.", "type": Text()},
    "registry_password": {"help": "Registry password (prefer the environment variable).",
                          "type": Text(secret=True)},
    "registry_ca_location": {"help": "CA file for the registry's TLS.",
                             "type": PathValue(exists=True, path_type=str)},
    "registry_timeout": {"help": "Seconds one schema registry request may take.",
                         "type": POSITIVE},
    "connect_timeout": {"help": "Seconds a command reading the topics waits for Kafka to "
                                "answer (and an --until-end run for the registry) before "
                                "it gives up.", "type": POSITIVE},
}


def _option(field: dataclasses.Field[Any]) -> Callable[[Any], Any]:
    """The click option setting the `StreamConfig` field `field`."""
    default = None if field.default is dataclasses.MISSING else field.default
    return click.option(
        "--" + field.name.replace("_", "-"),
        envvar=ENV_PREFIX + field.name.upper(),
        default=default,
        show_default=default is not None,  # never a secret: passwords have no default
        show_envvar=True,
        cls=ConnectionOption,
        **_OPTIONS[field.name],
    )


def stream_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Add the connection options and pass them on as one `config: StreamConfig`.

    Defaults are shown but never secrets: password options show no default.
    """
    names = [f.name for f in dataclasses.fields(StreamConfig)]

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        values = {name: kwargs.pop(name) for name in names}
        kwargs["config"] = StreamConfig.from_env(env={}, **values)
        return func(*args, **kwargs)

    for field in reversed(dataclasses.fields(StreamConfig)):
        wrapper = _option(field)(wrapper)
    return shared_options_last(wrapper)

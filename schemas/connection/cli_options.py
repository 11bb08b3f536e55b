"""The connection options every CLI command that talks to the stack takes.

Each is checked when the command line is parsed (a registry URL without a scheme, a
topic prefix Kafka cannot name topics with, a security protocol librdkafka does not
know): one `Error:` line naming the option, before any connection is tried.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import click

from rlmesh_stream.schemas.connection.config import (
    ENV_PREFIX,
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


class FiniteFloatRange(click.FloatRange):
    """A `click.FloatRange` that also refuses NaN and the infinities.

    A plain range lets them through: every comparison with NaN is false, and a range
    with no maximum has no bound for infinity to break. No interval, rate or timeout of
    ours can work with either.
    """

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return number


# The shared number types: a duration or rate that must be more than 0, or may be 0.
POSITIVE = FiniteFloatRange(min=0, min_open=True)
NON_NEGATIVE = FiniteFloatRange(min=0)


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
_OPTIONS: dict[str, dict[str, Any]] = {
    "bootstrap": {"help": "Kafka bootstrap servers."},
    "registry_url": {"help": "Confluent-API schema registry URL.",
                     "callback": _check(check_registry_url)},
    "topic_prefix": {"help": "Prefix of the event topics.",
                     "callback": _check(check_topic_prefix)},
    "security_protocol": {"help": "Kafka security.protocol (e.g. SASL_SSL).",
                          "type": click.Choice(SECURITY_PROTOCOLS, case_sensitive=False),
                          "callback": lambda _c, _p, v: v.upper() if v else v},
    "sasl_mechanism": {"help": "e.g. SCRAM-SHA-512."},
    "sasl_username": {"help": "SASL user name."},
    "sasl_password": {"help": "SASL password (prefer the environment variable)."},
    "ssl_ca_location": {"help": "CA file for TLS."},
    "registry_username": {"help": "Registry user."},
    "registry_password": {"help": "Registry password (prefer the environment variable)."},
    "registry_ca_location": {"help": "CA file for the registry's TLS."},
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

"""Connection settings shared by every side of the pipeline.

One `StreamConfig` carries where the stack is (bootstrap servers, registry
URL), the topic prefix and the security settings. It lives in `schemas/`
because producer, consumers and infra all need it and `schemas` is the one
package they may all import.

Precedence: explicit argument > environment (`RLMESH_STREAM_*`) > default
(the local stack `rlmesh-stream infra up` starts).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from rlmesh_stream.schemas.connection.redact import redact_url

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
DEFAULT_REGISTRY_URL = "http://127.0.0.1:8081/apis/ccompat/v7"
DEFAULT_TOPIC_PREFIX = "rlmesh.runtime"
DEFAULT_REGISTRY_TIMEOUT = 30.0
DEFAULT_CONNECT_TIMEOUT = 15.0

ENV_PREFIX = "RLMESH_STREAM_"


@dataclass(frozen=True)
class StreamConfig:
    """Where the stack is and how to talk to it.

    Secret fields (`sasl_password`, `registry_password`) are excluded from
    `repr`, and a password inside a URL is shown as `***`, so that logging a
    config never prints them.
    """

    bootstrap: str = DEFAULT_BOOTSTRAP
    registry_url: str = DEFAULT_REGISTRY_URL
    topic_prefix: str = DEFAULT_TOPIC_PREFIX
    security_protocol: str | None = None  # PLAINTEXT, SASL_SSL, SASL_PLAINTEXT, SSL
    sasl_mechanism: str | None = None  # e.g. SCRAM-SHA-512
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    ssl_ca_location: str | None = None
    registry_username: str | None = None
    registry_password: str | None = field(default=None, repr=False)
    registry_ca_location: str | None = None
    # Seconds one registry request may take. The client's own default is no limit, and a
    # registry that accepts a connection but never answers would hang its caller forever.
    registry_timeout: float = DEFAULT_REGISTRY_TIMEOUT
    # Seconds a command reading the topics (consume, export, tail, join --follow) waits for
    # Kafka's metadata, or an offline run (--until-end) for a registry that does not answer,
    # before it gives up with an error (a live run keeps retrying the registry).
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT

    def __repr__(self) -> str:
        shown = ", ".join(f"{f.name}={_shown(getattr(self, f.name))}" for f in fields(self)
                          if f.repr)
        return f"{type(self).__name__}({shown})"

    @classmethod
    def from_env(
        cls, env: Mapping[str, str] | None = None, **overrides: Any
    ) -> StreamConfig:
        """Build from `RLMESH_STREAM_<FIELD>` variables; non-None overrides win."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        for f in fields(cls):
            raw = env.get(ENV_PREFIX + f.name.upper())
            if raw:
                values[f.name] = _parse(f.name, f.type, raw)
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    def with_prefix(self, topic_prefix: str) -> StreamConfig:
        return replace(self, topic_prefix=topic_prefix)

    def kafka_config(self) -> dict[str, Any]:
        """librdkafka settings for a client of this stack (security included)."""
        conf: dict[str, Any] = {"bootstrap.servers": self.bootstrap}
        optional = {
            "security.protocol": self.security_protocol,
            "sasl.mechanism": self.sasl_mechanism,
            "sasl.username": self.sasl_username,
            "sasl.password": self.sasl_password,
            "ssl.ca.location": self.ssl_ca_location,
        }
        conf.update({k: v for k, v in optional.items() if v is not None})
        return conf

    def registry_config(self) -> dict[str, Any]:
        """Settings for `confluent_kafka.schema_registry.SchemaRegistryClient`."""
        # `max.retries` 0: the client would otherwise try each request 4 times with back-off,
        # so one call against a hung registry took 4 timeouts and more. A call is bounded by
        # `registry_timeout`; retrying is the caller's decision (the consumers rewind and
        # retry with back-off, the CLI reports the failure).
        conf: dict[str, Any] = {"url": self.registry_url, "timeout": self.registry_timeout,
                                "max.retries": 0}
        if self.registry_username is not None:
            conf["basic.auth.user.info"] = (
                f"{self.registry_username}:{self.registry_password or ''}"
            )
        if self.registry_ca_location is not None:
            conf["ssl.ca.location"] = self.registry_ca_location
        return conf


def _parse(name: str, type_name: Any, raw: str) -> Any:
    """An environment value as its field's type (only `float` fields need converting)."""
    if type_name not in ("float", float):
        return raw
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{ENV_PREFIX}{name.upper()}={raw!r} is not a number of seconds") from None
    if not math.isfinite(value) or value <= 0:  # NaN passes `<= 0`
        raise ValueError(f"{ENV_PREFIX}{name.upper()} must be a finite number of seconds > 0, "
                         f"got {raw!r}")
    return value


def _shown(value: Any) -> str:
    """A field's repr for `StreamConfig.__repr__`, with any URL password redacted."""
    return redact_url(repr(value))

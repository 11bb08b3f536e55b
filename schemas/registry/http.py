"""Writer schemas by id over plain HTTP: what a consumer process needs of the registry.

Why not `confluent_kafka.schema_registry.SchemaRegistryClient`: importing its package
pulls httpx, authlib and joserfc (its async and OAuth clients), about 0.5 s of CPU in
every consumer process, which only ever fetches schemas by id (and the subjects they
reference). `SchemaFetcher` makes the same two GET requests with `http.client`, with the
settings `StreamConfig.registry_config()` gives (comma-separated URLs, timeout, basic
auth from the settings or the URL, a CA file or directory), and answers like the
confluent client: the same shapes (`schema_str`, `schema_type`, `references`) and an
error carrying `http_status_code` and `error_code` (`registry.call` maps both kinds).
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import ssl
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from rlmesh_stream.schemas.errors import RlmeshStreamError

SUPPORTED = frozenset({"url", "timeout", "max.retries", "basic.auth.user.info",
                       "ssl.ca.location"})
"""The settings this client understands; any other needs the confluent client."""

_RETRIABLE = frozenset({408, 429, 500, 502, 503, 504})  # as the confluent client: next URL
_ACCEPT = ("application/vnd.schemaregistry.v1+json, application/vnd.schemaregistry+json, "
           "application/json")


class RegistryHttpError(RlmeshStreamError):
    """A registry's error answer (or none: `http_status_code` None), as SchemaRegistryError."""

    def __init__(self, http_status_code: int | None, error_code: int | None,
                 error_message: str) -> None:
        super().__init__(error_message)
        self.http_status_code = http_status_code
        self.error_code = error_code
        self.error_message = error_message

    def __str__(self) -> str:
        return (f"{self.error_message} (HTTP status code {self.http_status_code}, "
                f"SR code {self.error_code})")


@dataclass(frozen=True)
class Reference:
    name: str
    subject: str
    version: int


@dataclass(frozen=True)
class Schema:
    schema_str: str
    schema_type: str | None = None
    references: list[Reference] = field(default_factory=list)


@dataclass(frozen=True)
class Version:
    schema: Schema
    subject: str
    version: int
    schema_id: int | None = None  # as confluent's RegisteredSchema names it


def _schema(body: dict[str, Any]) -> Schema:
    refs = [Reference(r.get("name", ""), r["subject"], int(r["version"]))
            for r in body.get("references") or []]
    return Schema(body["schema"], body.get("schemaType"), refs)


class SchemaFetcher:
    """`get_schema(id)`, `get_version(subject, version)` and `get_latest_version(subject)`
    of a Confluent-API registry."""

    def __init__(self, conf: dict[str, Any]) -> None:
        unknown = set(conf) - SUPPORTED
        if unknown:
            raise ValueError(f"registry setting {sorted(unknown)[0]!r} needs the confluent "
                             "client")
        self.urls = [u.strip().rstrip("/") for u in str(conf["url"]).split(",") if u.strip()]
        if not self.urls or not all(u.startswith(("http://", "https://")) for u in self.urls):
            raise ValueError(f"invalid registry url {conf['url']!r}")
        self.timeout = float(conf.get("timeout") or 10)
        user_info = conf.get("basic.auth.user.info")
        first = urlsplit(self.urls[0])
        if user_info is None and first.username is not None:
            user_info = f"{unquote(first.username)}:{unquote(first.password or '')}"
        self._auth = (None if not user_info else
                      "Basic " + base64.b64encode(str(user_info).encode()).decode("ascii"))
        self._ca = conf.get("ssl.ca.location")
        self._context: ssl.SSLContext | None = None

    def get_schema(self, schema_id: int) -> Schema:
        return _schema(self._get(f"/schemas/ids/{int(schema_id)}"))

    def get_version(self, subject: str, version: int | str) -> Version:
        body = self._get(f"/subjects/{quote(subject, safe='')}/versions/{version}")
        sid = body.get("id")
        return Version(_schema(body), body.get("subject", subject),
                       int(body.get("version", version)), None if sid is None else int(sid))

    def get_latest_version(self, subject: str) -> Version:
        return self.get_version(subject, "latest")

    def _get(self, path: str) -> Any:
        for i, url in enumerate(self.urls):
            last = i == len(self.urls) - 1
            try:
                status, body = self._request(url, path)
            except (OSError, http.client.HTTPException) as exc:
                if last:
                    if isinstance(exc, OSError):
                        raise
                    raise RegistryHttpError(None, None, f"{type(exc).__name__}: {exc}") from exc
                continue
            if 200 <= status < 300:
                return json.loads(body)  # not JSON: registry.call says it is no registry
            if last or status not in _RETRIABLE:
                raise _error(status, body)
        raise AssertionError("unreachable")

    def _request(self, url: str, path: str) -> tuple[int, bytes]:
        parts = urlsplit(url)
        host = parts.hostname or ""
        if parts.scheme == "https":
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                host, parts.port, timeout=self.timeout, context=self._ssl())
        else:
            conn = http.client.HTTPConnection(host, parts.port, timeout=self.timeout)
        headers = {"Accept": _ACCEPT}
        if self._auth:
            headers["Authorization"] = self._auth
        try:
            conn.request("GET", f"{parts.path}{path}", headers=headers)
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()

    def _ssl(self) -> ssl.SSLContext:
        if self._context is None:
            ca = self._ca
            if ca is not None and os.path.isdir(str(ca)):
                self._context = ssl.create_default_context(capath=str(ca))
            elif ca is not None:
                self._context = ssl.create_default_context(cafile=str(ca))
            else:
                self._context = ssl.create_default_context(cafile=_default_ca())
        return self._context


def _default_ca() -> str | None:
    """The CA bundle the confluent client would use without `ssl.ca.location`."""
    if os.environ.get("SSL_CERT_FILE"):
        return os.environ["SSL_CERT_FILE"]
    try:
        import certifi
    except ImportError:
        return None
    return str(certifi.where())


def _error(status: int, body: bytes) -> RegistryHttpError:
    try:
        answer = json.loads(body)
        return RegistryHttpError(status, answer.get("error_code"), answer.get("message"))
    except (ValueError, AttributeError):
        return RegistryHttpError(status, -1, "Unknown Schema Registry Error: " + repr(body))

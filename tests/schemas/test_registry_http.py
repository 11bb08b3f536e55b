"""`registry_http.SchemaFetcher` answers as the confluent client does, on the real registry
and on a fake one (basic auth, error answers, a second URL, a server that is no registry)."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any, ClassVar

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient

from rlmesh_stream.schemas.connection.config import StreamConfig
from rlmesh_stream.schemas.contract.errors import RegistryProtocolError, RegistryUnavailableError
from rlmesh_stream.schemas.contract.topics import EventType
from rlmesh_stream.schemas.registry import client as registry
from rlmesh_stream.schemas.registry.http import RegistryHttpError, SchemaFetcher
from rlmesh_stream.schemas.registry.registrar import SchemaRegistrar


def test_a_schema_by_id_is_what_the_confluent_client_fetches(stream_config: StreamConfig
                                                             ) -> None:
    client = SchemaRegistryClient(stream_config.registry_config())
    sid = SchemaRegistrar(client, "avro", stream_config.topic_prefix).schema_id(
        EventType.EPISODE_COMPLETED)
    ours = SchemaFetcher(stream_config.registry_config()).get_schema(sid)
    theirs = client.get_schema(sid)
    assert json.loads(ours.schema_str) == json.loads(theirs.schema_str)
    assert (ours.schema_type or "AVRO") == (theirs.schema_type or "AVRO")
    assert [(r.name, r.subject, r.version) for r in ours.references] == [
        (r.name, r.subject, r.version) for r in theirs.references or []]


def test_a_subjects_latest_version_names_the_id_the_confluent_client_does(
        stream_config: StreamConfig) -> None:
    client = SchemaRegistryClient(stream_config.registry_config())
    SchemaRegistrar(client, "avro", stream_config.topic_prefix).schema_id(
        EventType.EPISODE_STARTED)
    subject = f"{EventType.EPISODE_STARTED.topic(stream_config.topic_prefix)}-value"
    ours = SchemaFetcher(stream_config.registry_config()).get_latest_version(subject)
    theirs = client.get_latest_version(subject)
    assert (ours.schema_id, ours.version) == (theirs.schema_id, theirs.version)


class _Fake(BaseHTTPRequestHandler):
    answers: ClassVar[dict[str, tuple[int, bytes]]] = {}
    seen: ClassVar[list[tuple[str, str | None]]] = []

    def do_GET(self) -> None:  # the http.server name
        self.seen.append((self.path, self.headers.get("Authorization")))
        status, body = self.answers.get(self.path.split("?")[0], (404, b"<html>no</html>"))
        self.send_response(status)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture
def fake() -> Iterator[str]:
    server = HTTPServer(("127.0.0.1", 0), _Fake)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Fake.seen.clear()
    _Fake.answers = {
        "/api/schemas/ids/7": (200, json.dumps({"schema": '"string"'}).encode()),
        "/api/schemas/ids/8": (404, json.dumps({"error_code": 40403,
                                                "message": "Schema not found"}).encode()),
        "/api/schemas/ids/9": (503, b"busy"),
        "/api/schemas/ids/10": (200, b"<html>not json</html>"),
        "/api/subjects/a%2Fb/versions/3": (200, json.dumps({
            "subject": "a/b", "version": 3, "schema": "{}", "schemaType": "PROTOBUF",
            "references": [{"name": "x", "subject": "s", "version": 1}]}).encode()),
    }
    yield f"http://127.0.0.1:{server.server_port}/api"
    server.shutdown()


def test_basic_auth_from_the_settings_or_the_url(fake: str) -> None:
    SchemaFetcher({"url": fake, "basic.auth.user.info": "ann:s3cret"}).get_schema(7)
    user_in_url = fake.replace("http://", "http://bob:pw%40x@")
    SchemaFetcher({"url": user_in_url}).get_schema(7)
    SchemaFetcher({"url": fake}).get_schema(7)
    sent = [auth for _, auth in _Fake.seen]
    assert sent == [f"Basic {base64.b64encode(b'ann:s3cret').decode()}",
                    f"Basic {base64.b64encode(b'bob:pw@x').decode()}", None]


def test_answers_map_to_the_contract_errors_as_the_confluent_client_does(fake: str) -> None:
    fetcher = SchemaFetcher({"url": fake, "timeout": 5})
    assert fetcher.get_schema(7).schema_str == '"string"'
    with pytest.raises(RegistryHttpError) as not_found:
        registry.call("fetch", fetcher.get_schema, 8)
    assert registry.is_not_found(not_found.value) and not_found.value.error_code == 40403
    with pytest.raises(RegistryUnavailableError):
        registry.call("fetch", fetcher.get_schema, 9)
    with pytest.raises(RegistryProtocolError):  # a 404 with no registry error code
        registry.call("fetch", fetcher.get_schema, 11)
    with pytest.raises(RegistryProtocolError):  # an answer that is not JSON
        registry.call("fetch", fetcher.get_schema, 10)
    version = fetcher.get_version("a/b", 3)
    assert (version.subject, version.version, version.schema.schema_type) == ("a/b", 3,
                                                                              "PROTOBUF")
    assert version.schema.references[0].subject == "s"


def test_an_unreachable_url_is_skipped_for_the_next_and_unavailable_when_last(fake: str
                                                                             ) -> None:
    dead = "http://127.0.0.1:1/api"
    assert SchemaFetcher({"url": f"{dead},{fake}"}).get_schema(7).schema_str == '"string"'
    with pytest.raises(RegistryUnavailableError):
        registry.call("fetch", SchemaFetcher({"url": dead, "timeout": 2}).get_schema, 7)


def test_settings_it_does_not_know_are_refused(fake: str) -> None:
    with pytest.raises(ValueError, match=r"ssl\.certificate\.location"):
        SchemaFetcher({"url": fake, "ssl.certificate.location": "/x"})

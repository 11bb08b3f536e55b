"""What the bad-input table's rows point at: servers that misbehave, stores, logs, prefixes.

Each fixture here is named like the `{placeholder}` a row of `test_bad_input.py` uses, so a
row only names what it needs and the test resolves it on demand (a row that needs no
server starts none). Every server is bound to 127.0.0.1 and stopped by its fixture.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from rlmesh_stream.schemas.connection.config import StreamConfig


class _HtmlPage(BaseHTTPRequestHandler):
    def _page(self) -> None:
        body = b"<!doctype html><html><body><h1>Welcome</h1></body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = _page

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def html_registry() -> Iterator[str]:
    """A registry URL whose server answers every request with an HTML page (HTTP 200)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _HtmlPage)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/apis/ccompat/v7"
    server.shutdown()
    server.server_close()


@pytest.fixture
def registry_root(stream_config: StreamConfig) -> str:
    """The test registry's scheme://host:port, without its API path."""
    from urllib.parse import urlsplit

    parts = urlsplit(stream_config.registry_url)
    return f"{parts.scheme}://{parts.netloc}"


@pytest.fixture
def fresh_prefix(topic_prefix: str) -> str:
    """A topic prefix under which no topic exists."""
    return topic_prefix


@pytest.fixture
def published_prefix(stream_config: StreamConfig) -> str:
    """A prefix whose session_started topic holds one record, framed by the real registry."""
    from confluent_kafka import Producer
    from confluent_kafka.schema_registry import SchemaRegistryClient

    from rlmesh_stream.infra.topics import ensure_topics
    from rlmesh_stream.schemas.codec.serde import EventSerializer
    from rlmesh_stream.schemas.contract import events as ev
    from rlmesh_stream.schemas.contract.topics import EventType

    ensure_topics(stream_config, partitions=1, replication_factor=1)
    route = ev.RuntimeEnvContext(env_id="e", env_component_id="ec", model_component_id="m")
    event = ev.SessionStartedEvent(session_id="s", route=route, env_id="e")
    serializer = EventSerializer(SchemaRegistryClient(stream_config.registry_config()),
                                 topic_prefix=stream_config.topic_prefix)
    producer = Producer(stream_config.kafka_config())
    producer.produce(EventType.SESSION_STARTED.topic(stream_config.topic_prefix), key=b"s",
                     value=serializer.serialize(event))
    assert producer.flush(30) == 0
    return stream_config.topic_prefix


@pytest.fixture
def empty_store(tmp_path: Path) -> Path:
    """A DuckDB store with the consumers' tables, empty."""
    from rlmesh_stream.consumers.sinks import open_sink

    path = tmp_path / f"empty-{uuid.uuid4().hex[:6]}.duckdb"
    open_sink(f"duckdb://{path}").close()
    return path


@pytest.fixture
def wrong_store(tmp_path: Path) -> Path:
    """A DuckDB file whose `episodes` table is someone else's (one column `a`)."""
    import duckdb

    path = tmp_path / "wrong.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE episodes (a INTEGER)")
    con.close()
    return path


@pytest.fixture
def nan_log(tmp_path: Path) -> Path:
    """A JSONL training log whose second row's time is NaN."""
    path = tmp_path / "train.jsonl"
    path.write_text('{"step": 1, "time": 1700000000.0, "checkpoint": "m", "loss": 1.0}\n'
                    '{"step": 2, "time": NaN, "checkpoint": "m", "loss": 0.5}\n')
    return path


@pytest.fixture
def not_a_database(tmp_path: Path) -> Path:
    """A file named like an SQLite database that holds text."""
    path = tmp_path / "mlflow.db"
    path.write_text("not a database\n")
    return path


@pytest.fixture
def malformed_jsonl(tmp_path: Path) -> Path:
    """A JSONL training log whose second line is cut short."""
    path = tmp_path / "broken.jsonl"
    path.write_text('{"step": 1, "checkpoint": "m"}\n{"step": 2, "checkpoint": \n')
    return path


@pytest.fixture
def not_parquet(tmp_path: Path) -> Path:
    """A `.parquet` training log that is not Parquet."""
    path = tmp_path / "train.parquet"
    path.write_bytes(b"PAR1 and nothing else")
    return path


def _event_file_claiming(folder: Path, length: int) -> Path:
    """A TensorBoard event file of one record whose length field (with a valid CRC) says
    `length` bytes, in a file of 16."""
    import struct

    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

    path = folder / f"events.out.tfevents.{length}"
    header = struct.pack("<Q", length)
    path.write_bytes(header + struct.pack("<I", masked_crc32c(header)) + b"data")
    return path


@pytest.fixture
def event_claiming_2_40(tmp_path: Path) -> Path:
    return _event_file_claiming(tmp_path, 2**40)


@pytest.fixture
def event_claiming_2_64(tmp_path: Path) -> Path:
    return _event_file_claiming(tmp_path, 2**64 - 1)


@pytest.fixture
def unwritable_dir(tmp_path: Path) -> Iterator[Path]:
    """A folder this process cannot create files in (as root: sysfs, which refuses)."""
    if os.geteuid() == 0:
        yield Path("/sys")
        return
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o555)
    yield folder
    folder.chmod(0o755)


@pytest.fixture
def bootstrap(stream_config: StreamConfig) -> str:
    """The test Kafka's bootstrap servers."""
    return stream_config.bootstrap


@pytest.fixture
def registry(stream_config: StreamConfig) -> str:
    """The test schema registry's URL."""
    return stream_config.registry_url

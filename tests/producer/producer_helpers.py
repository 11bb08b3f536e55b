"""Helpers of the producer tests: read back what landed, and a throwaway broker we may stop.

The fault tests stop and restart Kafka, which must never happen to the shared
dev stack, so they get their own single-node KRaft broker in a tmp dir on
free ports. It is built from infra's `KafkaNode` (config, storage format,
command line) and `rlmesh_stream.infra.proc` (spawn/stop); only the start/stop sequencing
lives here, since infra exposes no per-node start/stop API yet.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.schema_registry import SchemaRegistryClient

from rlmesh_stream.infra import proc
from rlmesh_stream.infra.artifacts import Artifacts
from rlmesh_stream.infra.java import find_java
from rlmesh_stream.infra.kafka import KafkaNode, kafka_ready, random_cluster_id
from rlmesh_stream.schemas.codec.serde import EventDecoder
from rlmesh_stream.schemas.contract import headers as h
from rlmesh_stream.schemas.contract.topics import EventType, event_type_of_topic


@dataclass
class Landed:
    """One record read back from Kafka, decoded."""

    topic: str
    event_type: EventType
    key: bytes
    partition: int
    headers: dict[str, bytes]
    event: Any
    value_size: int

    @property
    def producer_id(self) -> str:
        stamp = h.delivery_stamp(self.headers)
        assert stamp is not None, self.headers
        return stamp[1].decode()

    @property
    def sequence(self) -> int:
        stamp = h.delivery_stamp(self.headers)
        assert stamp is not None, self.headers
        return h.parse_sequence(stamp[2])


def read_back(bootstrap: str, registry_url: str, prefix: str, expected: int,
              timeout: float = 60.0, decode: bool = True) -> list[Landed]:
    """Every record under `prefix` (all event topics), stopping at `expected` or `timeout`."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    wanted = {t.topic(prefix) for t in EventType}
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"t-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    decoder = EventDecoder(SchemaRegistryClient({"url": registry_url})) if decode else None
    out: list[Landed] = []
    deadline = time.monotonic() + timeout
    assigned: set[str] = set()
    try:
        while len(out) < expected and time.monotonic() < deadline:
            present = set(admin.list_topics(timeout=10).topics) & wanted
            if present - assigned:
                assigned |= present
                md = admin.list_topics(timeout=10).topics
                consumer.assign([TopicPartition(t, p, 0) for t in sorted(assigned)
                                 for p in md[t].partitions])
            if not assigned:
                time.sleep(0.2)
                continue
            for msg in consumer.consume(num_messages=5000, timeout=0.5):
                if msg.error():
                    continue
                value = msg.value() or b""
                out.append(Landed(
                    topic=msg.topic(), event_type=event_type_of_topic(msg.topic(), prefix),
                    key=msg.key() or b"", partition=msg.partition(),
                    headers={k: v for k, v in (msg.headers() or [])},
                    event=decoder.decode(value) if decoder else None, value_size=len(value)))
    finally:
        consumer.close()
    return out



# -- the throwaway broker -------------------------------------------------------------------------

def _kafka_libs() -> Path:
    explicit = os.environ.get("RLMESH_STREAM_KAFKA_LIBS")
    if explicit:
        return Path(explicit)
    artifacts = Artifacts.from_env()
    if not (artifacts.kafka_home / ".complete").exists():
        artifacts.ensure()
    return artifacts.kafka_libs


class ThrowawayKafka:
    """A single KRaft node we may stop, kill and restart; its data survives restarts."""

    def __init__(self, home: Path) -> None:
        self.java = find_java(17, "the throwaway test broker")
        self.node = KafkaNode(home=home, libs=_kafka_libs(), node_id=1,
                              port=proc.free_port(), controller_port=proc.free_port())
        self.node.write_config()
        # Kafka's own id rules (e.g. never starting with "-", which its CLI reads as a flag).
        self.node.format_storage(self.java, random_cluster_id())
        self.pid: int | None = None

    @property
    def bootstrap(self) -> str:
        return self.node.bootstrap

    @property
    def running(self) -> bool:
        return self.pid is not None and proc.is_alive(self.pid)

    def start(self, timeout: float = 120.0) -> None:
        if self.running:
            return
        self.pid = proc.spawn_detached(self.node.command(self.java), self.node.home,
                                       self.node.log_file)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not proc.is_alive(self.pid):
                raise RuntimeError(f"throwaway Kafka exited; see {self.node.log_file}")
            if proc.port_open(self.node.port) and kafka_ready(self.bootstrap, 3) is not None:
                return
            time.sleep(0.5)
        raise RuntimeError(f"throwaway Kafka not ready in {timeout} s; see {self.node.log_file}")

    def stop(self) -> None:
        """A clean broker shutdown (SIGTERM, then SIGKILL after 30 s)."""
        if self.pid is not None:
            proc.stop(self.pid, timeout=30)
            self.pid = None

    def kill(self) -> None:
        if self.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGKILL)
            proc.stop(self.pid, timeout=10)
            self.pid = None




class TcpGate:
    """A TCP forwarder we can close and reopen: a registry that goes away and comes back.

    While closed nothing listens on its port (connections are refused), exactly
    what a client sees of a registry that is down.
    """

    def __init__(self, target_host: str, target_port: int) -> None:
        import socket
        import threading

        self._socket_mod = socket
        self._threading = threading
        self.target = (target_host, target_port)
        self.port = proc.free_port()
        self._server: Any = None
        self._stop = threading.Event()

    def open(self) -> None:
        socket = self._socket_mod
        server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", self.port))
        server.listen(64)
        server.settimeout(0.2)
        self._server = server
        self._stop.clear()
        self._threading.Thread(target=self._accept, args=(server,), daemon=True).start()

    def close(self) -> None:
        self._stop.set()
        if self._server is not None:
            self._server.close()
            self._server = None

    def _accept(self, server: Any) -> None:
        socket = self._socket_mod
        while not self._stop.is_set():
            try:
                client, _ = server.accept()
            except (TimeoutError, OSError):
                continue
            upstream = socket.create_connection(self.target)
            for a, b in ((client, upstream), (upstream, client)):
                self._threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: Any, dst: Any) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                dst.shutdown(1)

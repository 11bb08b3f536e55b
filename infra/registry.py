"""Apicurio Registry, serving the Confluent Schema Registry API under /apis/ccompat/v7.

Storage is `kafkasql`: every change is a record in a compacted journal topic on the
stack's own Kafka, which the registry replays at start. That is what makes schemas
survive a restart without a database, and why the registry starts after Kafka.

Quarkus opens a second, *management* HTTP interface (health, metrics) on 0.0.0.0:9000
by default; it is bound to loopback on a port the stack chooses, so two stacks on one
machine do not collide and nothing listens beyond 127.0.0.1.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from rlmesh_stream.infra.java import Java

HEAP = "-Xmx512m"
CCOMPAT_PATH = "/apis/ccompat/v7"
JOURNAL_TOPIC = "kafkasql-journal"
SNAPSHOTS_TOPIC = "kafkasql-snapshots"


@dataclass(frozen=True)
class RegistryServer:
    home: Path  # the registry's directory inside the stack home (cwd, log)
    dist: Path  # the cached Apicurio distribution (holds quarkus-run.jar)
    port: int
    management_port: int
    bootstrap: str  # the Kafka that stores the journal
    host: str = "127.0.0.1"

    @property
    def log_file(self) -> Path:
        return self.home / "registry.log"

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}{CCOMPAT_PATH}"

    def command(self, java: Java) -> list[str]:
        props = {
            "quarkus.http.host": self.host,
            "quarkus.http.port": str(self.port),
            "quarkus.management.host": self.host,
            "quarkus.management.port": str(self.management_port),
            "apicurio.storage.kind": "kafkasql",
            "apicurio.kafkasql.bootstrap.servers": self.bootstrap,
            "apicurio.kafkasql.topic": JOURNAL_TOPIC,
            "apicurio.kafkasql.snapshots.topic": SNAPSHOTS_TOPIC,
            # The journal consumer's idle poll; at the default 5 s, replaying the journal at
            # start waits out two empty polls (~11 s of a ~21 s start). 100 ms: ~2 s.
            "apicurio.kafkasql.consumer.poll.timeout": "100",
            # Marks the process as this stack's, for `owns()`; Quarkus ignores it.
            "rlmesh.stream.home": str(self.home),
        }
        # C1 only: the registry serves a handful of requests, so start-up time and memory
        # matter more than peak throughput (measured: ~15% faster start, ~35 MiB less RSS).
        return [str(java.path), HEAP, "-XX:TieredStopAtLevel=1",
                *(f"-D{k}={v}" for k, v in props.items()),
                "-jar", str(self.dist / "quarkus-run.jar")]


def registry_ready(url: str, timeout: float = 5.0) -> bool:
    """True once the Confluent-compatible API answers a subject listing with 200."""
    try:
        with urllib.request.urlopen(f"{url.rstrip('/')}/subjects", timeout=timeout) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False

"""One Apache Kafka node in KRaft mode (broker and controller in one JVM).

The node's identity lives in its data directory: the storage is formatted once,
with a cluster id kept in the stack state, and never again, so topics and their
records (the registry's journal included) survive `down` and `up`.

Written as a per-node class so a later multi-broker mode can run several of these
with a shared `controller.quorum.voters`.
"""

from __future__ import annotations

import base64
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

from rlmesh_stream.infra.errors import StartupError
from rlmesh_stream.infra.java import Java

# Every topic partition costs broker heap; a test run creates thousands (a prefix per test):
# a dev broker holding 10 844 partitions ran out of a 512 MiB heap, hence 1 GiB.
HEAP = "-Xmx1g"
FORMAT_TIMEOUT_S = 180.0  # a JVM start and a few files: seconds, normally


@dataclass(frozen=True)
class KafkaNode:
    """Files and command line of one combined broker+controller node."""

    home: Path  # this node's directory inside the stack home
    libs: Path  # the cached Kafka jars
    node_id: int
    port: int  # client listener (PLAINTEXT)
    controller_port: int
    host: str = "127.0.0.1"

    @property
    def data_dir(self) -> Path:
        return self.home / "data"

    @property
    def properties_file(self) -> Path:
        return self.home / "server.properties"

    @property
    def log_file(self) -> Path:
        return self.home / "kafka.log"

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def is_formatted(self) -> bool:
        return (self.data_dir / "meta.properties").exists()

    def properties(self) -> str:
        voters = f"{self.node_id}@{self.host}:{self.controller_port}"
        props = {
            "process.roles": "broker,controller",
            "node.id": str(self.node_id),
            "controller.quorum.voters": voters,
            "listeners": f"PLAINTEXT://{self.host}:{self.port},"
                         f"CONTROLLER://{self.host}:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{self.host}:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(self.data_dir),
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "num.partitions": "1",
            # Observation payloads can be large: let producers send up to 16 MiB batches.
            "message.max.bytes": str(16 * 1024 * 1024),
            "replica.fetch.max.bytes": str(16 * 1024 * 1024),
            "auto.create.topics.enable": "true",
        }
        return "".join(f"{k}={v}\n" for k, v in props.items())

    def write_config(self) -> None:
        """(Re)write server.properties: ports may change between runs, data may not."""
        self.home.mkdir(parents=True, exist_ok=True)
        self.properties_file.write_text(self.properties())
        log4j = (Path(__file__).parent / "kafka-log4j2.yaml").read_text()
        (self.home / "log4j2.yaml").write_text(log4j)

    def classpath(self) -> str:
        return f"{self.libs}/*"

    def format_storage(self, java: Java, cluster_id: str) -> None:
        """Format the data directory once; a formatted one is left alone."""
        if self.is_formatted():
            return
        cmd = [str(java.path), "-cp", self.classpath(), "kafka.tools.StorageTool", "format",
               "-t", cluster_id, "-c", str(self.properties_file)]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, cwd=self.home,
                                  check=False, timeout=FORMAT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise StartupError(f"formatting Kafka storage in {self.data_dir} took over "
                               f"{FORMAT_TIMEOUT_S:.0f} s; is the machine overloaded?") from None
        if done.returncode != 0:
            raise StartupError(f"formatting Kafka storage in {self.data_dir} failed "
                               f"({done.stderr.strip() or done.stdout.strip()}); "
                               f"remove that directory if it is not needed and retry.")

    def command(self, java: Java) -> list[str]:
        return [
            str(java.path), HEAP, "-Xms128m",
            f"-Dlog4j2.configurationFile={self.home / 'log4j2.yaml'}",
            f"-Dkafka.logs.dir={self.home}",
            "-cp", self.classpath(), "kafka.Kafka", str(self.properties_file),
        ]


def random_cluster_id(java: Java | None = None, libs: Path | None = None) -> str:
    """A KRaft cluster id as Kafka's `Uuid.randomUuid()` makes one: 16 random bytes,
    URL-safe base64 without padding, never starting with "-" (Kafka rejects that).

    Done in Python because it saves a JVM start (seconds on a busy 2-core machine);
    `java` and `libs` are accepted and unused, for callers written against the
    earlier version that ran Kafka's StorageTool.
    """
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cluster_id.startswith("-"):
            return cluster_id


def kafka_ready(bootstrap: str, timeout: float = 5.0) -> int | None:
    """Number of live brokers if the cluster answers a metadata request, else None."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0,
                         "socket.connection.setup.timeout.ms": 2000})
    try:
        md = admin.list_topics(timeout=timeout)
    except Exception:
        return None
    return len(md.brokers) or None

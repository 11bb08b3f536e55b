"""A three-broker KRaft cluster on loopback, plus the registry: `infra up --brokers 3`.

Three combined nodes (broker + controller in one JVM each) form both the
controller quorum (three voters: any one may die) and the three brokers. That
is the smallest layout where a replicated topic survives a broker's death with
`min.insync.replicas=2` and `acks=all`: a write is acknowledged only once two
replicas have it, so killing any one broker loses nothing acknowledged.

Every node is a `KafkaNode` (infra/kafka.py) with a shared voter list and the
replication defaults the event topics need (replication factor 3, min ISR 2,
no unclean leader election). State (pids, ports, cluster id) lives in
`<home>/cluster.json`; like `LocalStack`, `down` stops only the pids whose
command line names this home. Nodes can be killed, stopped and restarted one
by one, which is what the fault suite does.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from rlmesh_stream.infra import proc
from rlmesh_stream.infra.artifacts import Artifacts
from rlmesh_stream.infra.errors import StackError, StartupError
from rlmesh_stream.infra.java import Java, find_java
from rlmesh_stream.infra.kafka import KafkaNode, kafka_ready, random_cluster_id
from rlmesh_stream.infra.registry import RegistryServer, registry_ready

KAFKA_MIN_JAVA = 17
REGISTRY_MIN_JAVA = 21
READY_TIMEOUT = 180.0
REGISTRY_READY_TIMEOUT = 240.0
REPLICATION_FACTOR = 3
MIN_INSYNC_REPLICAS = 2


@dataclass(frozen=True)
class ClusterNode(KafkaNode):
    """One combined node of the cluster: KafkaNode with the shared quorum and replication."""

    voters: str = ""
    replication_factor: int = REPLICATION_FACTOR
    min_insync: int = MIN_INSYNC_REPLICAS

    def properties(self) -> str:
        props = dict(line.split("=", 1) for line in super().properties().splitlines() if line)
        rf, isr = str(self.replication_factor), str(self.min_insync)
        props.update({
            "controller.quorum.voters": self.voters,
            "default.replication.factor": rf,
            "min.insync.replicas": isr,
            "offsets.topic.replication.factor": rf,
            "transaction.state.log.replication.factor": rf,
            "transaction.state.log.min.isr": isr,
            "share.coordinator.state.topic.replication.factor": rf,
            "share.coordinator.state.topic.min.isr": isr,
            "unclean.leader.election.enable": "false",
            # A killed broker is fenced after this long without a heartbeat.
            "broker.session.timeout.ms": "6000",
        })
        return "".join(f"{k}={v}\n" for k, v in props.items())


@dataclass
class NodePorts:
    node_id: int
    port: int
    controller_port: int


@dataclass
class LocalCluster(proc.HomeState):
    """`brokers` combined KRaft nodes and one registry, all children of this home."""

    home: Path
    brokers: int = 3
    artifacts: Artifacts = field(default_factory=Artifacts.from_env)
    host: str = "127.0.0.1"
    kafka_ports: list[int] | None = None  # client ports; default: previous run's, else free
    registry_port: int | None = None
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    STATE_FILE: ClassVar[str] = "cluster.json"  # proc.HomeState

    def __post_init__(self) -> None:
        self.home = self.home.resolve()
        if self.brokers < 3:
            raise StackError(f"a cluster needs at least 3 brokers for replication factor "
                             f"{REPLICATION_FACTOR} and min.insync.replicas "
                             f"{MIN_INSYNC_REPLICAS}, not {self.brokers}.")
        state = self._load_state()
        self.registry_port = (self.registry_port or state.get("registry", {}).get("port")
                              or proc.free_port(self.host))
        if state.get("nodes") and len(state["nodes"]) != self.brokers:
            raise StackError(f"the cluster in {self.home} has {len(state['nodes'])} brokers, "
                             f"not {self.brokers}; use another --home.")

    # -- state -------------------------------------------------------------------------------

    def _ports(self, state: dict[str, Any]) -> list[NodePorts]:
        known = state.get("nodes") or []
        if known:
            return [NodePorts(n["node_id"], n["port"], n["controller_port"]) for n in known]
        wanted = self.kafka_ports or [proc.free_port(self.host) for _ in range(self.brokers)]
        return [NodePorts(i + 1, wanted[i], proc.free_port(self.host))
                for i in range(self.brokers)]

    def nodes(self) -> list[ClusterNode]:
        ports = self._ports(self._load_state())
        voters = ",".join(f"{p.node_id}@{self.host}:{p.controller_port}" for p in ports)
        return [ClusterNode(home=self.home / f"kafka-{p.node_id}",
                            libs=self.artifacts.kafka_libs, node_id=p.node_id, port=p.port,
                            controller_port=p.controller_port, host=self.host, voters=voters)
                for p in ports]

    def node(self, node_id: int) -> ClusterNode:
        return next(n for n in self.nodes() if n.node_id == node_id)

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes())

    @property
    def registry(self) -> RegistryServer:
        state = self._load_state().get("registry", {})
        assert self.registry_port is not None
        return RegistryServer(home=self.home / "registry", dist=self.artifacts.registry_home,
                              port=self.registry_port,
                              management_port=state.get("management_port") or 0,
                              bootstrap=self.bootstrap, host=self.host)

    @property
    def registry_url(self) -> str:
        return self.registry.url

    # -- lifecycle -----------------------------------------------------------------------------

    def up(self, log: Callable[[str], None] = lambda _m: None, *,
           with_registry: bool = True) -> None:
        """Start every node that is not running (formatting new ones), then the registry."""
        java = find_java(KAFKA_MIN_JAVA, "Kafka", self.env)
        self.artifacts.ensure()
        state = self._load_state()
        nodes = self.nodes()
        state["nodes"] = [{"node_id": n.node_id, "port": n.port,
                           "controller_port": n.controller_port} for n in nodes]
        cluster_id = state.get("cluster_id") or random_cluster_id(java, self.artifacts.kafka_libs)
        state["cluster_id"] = cluster_id
        self._save_state(state)
        for n in nodes:
            if self.pid(n.node_id) is None:
                self._start_node(n, java, cluster_id, log)
        self.wait_for_brokers(self.brokers, READY_TIMEOUT)
        log(f"kafka cluster ready: {self.bootstrap}")
        if with_registry:
            self.start_registry(log)

    def _start_node(self, node: ClusterNode, java: Java, cluster_id: str,
                    log: Callable[[str], None]) -> None:
        proc.check_port_free(node.port, f"Kafka broker {node.node_id}", "--kafka-port",
                             self.host)
        node.write_config()
        node.format_storage(java, cluster_id)
        log(f"starting kafka node {node.node_id} on {node.bootstrap} ...")
        pid = proc.spawn_detached(node.command(java), node.home, node.log_file)
        self._set_pid(f"node-{node.node_id}", pid)

    def start_node(self, node_id: int, wait: bool = True) -> None:
        """(Re)start one node with its data and ports; wait until it is a live broker again."""
        java = find_java(KAFKA_MIN_JAVA, "Kafka", self.env)
        self._start_node(self.node(node_id), java, self._load_state()["cluster_id"],
                         lambda _m: None)
        if wait:
            self.wait_for_brokers(self.brokers, READY_TIMEOUT)

    def kill_node(self, node_id: int, sig: int = signal.SIGKILL) -> None:
        """Send `sig` to one node (SIGKILL: no shutdown, no flush) and reap it."""
        pid = self.pid(node_id)
        if pid is None:
            return
        if sig == signal.SIGKILL:
            os.killpg(pid, signal.SIGKILL)
            deadline = time.monotonic() + 30
            while proc.is_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            proc.stop(pid, timeout=1)  # reaps our child
        else:
            proc.stop(pid)
        self._set_pid(f"node-{node_id}", None)

    def stop_node(self, node_id: int) -> None:
        """A clean shutdown (SIGTERM): leadership moves away before the process exits."""
        self.kill_node(node_id, signal.SIGTERM)

    def start_registry(self, log: Callable[[str], None] = lambda _m: None) -> None:
        if self.pid_of("registry") is not None:
            return
        java = find_java(REGISTRY_MIN_JAVA, "Apicurio Registry", self.env)
        state = self._load_state()
        management = state.get("registry", {}).get("management_port") or proc.free_port(
            self.host)
        server = self.registry
        server = RegistryServer(home=server.home, dist=server.dist, port=server.port,
                                management_port=management, bootstrap=self.bootstrap,
                                host=self.host)
        proc.check_port_free(server.port, "schema registry", "--registry-port", self.host)
        server.home.mkdir(parents=True, exist_ok=True)
        log(f"starting schema registry on {server.url} ...")
        pid = proc.spawn_detached(server.command(java), server.home, server.log_file)
        state = self._load_state()
        state["registry"] = {"port": server.port, "management_port": management, "pid": pid,
                             "log": str(server.log_file)}
        self._save_state(state)
        proc.wait_ready("schema registry", pid, server.log_file, REGISTRY_READY_TIMEOUT,
                        lambda: registry_ready(server.url))
        log(f"schema registry ready: {server.url}")

    def stop_registry(self) -> None:
        pid = self.pid_of("registry")
        if pid is not None:
            proc.stop(pid)
        state = self._load_state()
        state.setdefault("registry", {})["pid"] = None
        self._save_state(state)

    def down(self, log: Callable[[str], None] = lambda _m: None) -> list[str]:
        """Stop the registry, then every node this home started."""
        stopped = []
        if self.pid_of("registry") is not None:
            log("stopping registry ...")
            self.stop_registry()
            stopped.append("registry")
        for n in self.nodes():
            if self.pid(n.node_id) is not None:
                log(f"stopping kafka node {n.node_id} ...")
                self.stop_node(n.node_id)
                stopped.append(f"kafka-{n.node_id}")
        return stopped

    # -- inspection ------------------------------------------------------------------------------

    def pid(self, node_id: int) -> int | None:
        return self.pid_of(f"node-{node_id}")

    def pid_of(self, name: str) -> int | None:
        state = self._load_state()
        pid = (state.get("registry", {}).get("pid") if name == "registry"
               else (state.get("pids") or {}).get(name))
        return pid if proc.owns(pid, self.marker) else None

    def _set_pid(self, name: str, pid: int | None) -> None:
        state = self._load_state()
        state.setdefault("pids", {})[name] = pid
        self._save_state(state)

    def live_brokers(self) -> int:
        return kafka_ready(self.bootstrap) or 0

    def wait_for_brokers(self, count: int, timeout: float = READY_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for n in self.nodes():
                pid = self.pid(n.node_id)
                if pid is None and (self._load_state().get("pids") or {}).get(
                        f"node-{n.node_id}") is not None:
                    raise StartupError(f"kafka node {n.node_id} exited during startup; "
                                       f"see {n.log_file}.")
            if self.live_brokers() >= count:
                return
            time.sleep(0.5)
        raise StartupError(f"the cluster in {self.home} did not reach {count} live brokers "
                           f"within {timeout:.0f} s; see the kafka-*/kafka.log files.")

    def leader_of(self, topic: str, partition: int = 0) -> int:
        """The node id currently leading a partition."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        md = admin.list_topics(topic=topic, timeout=10)
        return int(md.topics[topic].partitions[partition].leader)


# -- the CLI's entry points (`rlmesh-stream infra up --brokers 3`, `infra down`) ---------------

DEFAULT_KAFKA_PORT = 9092
DEFAULT_REGISTRY_PORT = 8081


def cluster_home(stack_home: Path) -> Path:
    """A cluster lives beside the single-node stack of the same home, never on top of it."""
    return stack_home / "cluster"


def cli_up(stack_home: Path, brokers: int, kafka_port: int | None, registry_port: int | None,
           log: Callable[[str], None]) -> LocalCluster:
    """`infra up --brokers N`: client ports kafka_port .. kafka_port+N-1 (default 9092...)."""
    home = cluster_home(stack_home)
    first = kafka_port or DEFAULT_KAFKA_PORT
    cluster = LocalCluster(home, brokers=brokers,
                           kafka_ports=[first + i for i in range(brokers)],
                           registry_port=registry_port or DEFAULT_REGISTRY_PORT)
    cluster.up(log)
    return cluster


def cli_down(stack_home: Path, log: Callable[[str], None]) -> list[str]:
    """Stop the cluster of this home, if one was ever started."""
    home = cluster_home(stack_home)
    if not (home / "cluster.json").exists():
        return []
    state = json.loads((home / "cluster.json").read_text())
    return LocalCluster(home, brokers=len(state.get("nodes") or []) or 3).down(log)

"""The local stack: one Kafka node and one Apicurio Registry, started from cached jars.

Everything a stack owns lives under its *home* directory (default
`~/.cache/rlmesh-stream/stack`): the Kafka data, the server logs and `state.json`,
which records the pids and ports that `up` used. `down` reads that file and stops
only those pids, and only if their command line still names this home, so it never
touches a Kafka or registry someone else runs on the machine.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rlmesh_stream.infra import proc
from rlmesh_stream.infra.artifacts import Artifacts, default_cache_dir
from rlmesh_stream.infra.errors import StackError
from rlmesh_stream.infra.java import Java, find_java
from rlmesh_stream.infra.kafka import KafkaNode, kafka_ready, random_cluster_id
from rlmesh_stream.infra.registry import RegistryServer, registry_ready

DEFAULT_KAFKA_PORT = 9092
DEFAULT_REGISTRY_PORT = 8081
HOME_ENV = "RLMESH_STREAM_HOME"
KAFKA_MIN_JAVA = 17
REGISTRY_MIN_JAVA = 21
KAFKA_READY_TIMEOUT = 120.0
REGISTRY_READY_TIMEOUT = 240.0


def default_home(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    return Path(env.get(HOME_ENV) or default_cache_dir(env) / "stack")


@dataclass
class ServerStatus:
    """What `status` says about one server process."""

    name: str
    running: bool
    pid: int | None
    address: str
    log_file: str
    rss_mib: float | None = None
    java: str | None = None
    # not running from this home, yet something (another home's server?) holds its port
    port_taken: bool = False


@dataclass
class StackInfo:
    home: str
    bootstrap: str
    registry_url: str
    servers: dict[str, ServerStatus] = field(default_factory=dict)

    @property
    def running(self) -> bool:
        return bool(self.servers) and all(s.running for s in self.servers.values())

    def to_json(self) -> dict[str, Any]:
        return {"home": self.home, "bootstrap": self.bootstrap, "registry_url": self.registry_url,
                "running": self.running,
                "servers": {k: asdict(v) for k, v in self.servers.items()}}


class LocalStack(proc.HomeState):
    """A Kafka node plus a schema registry under one home directory.

    Ports not given are taken from the previous run's state (so a restarted stack
    keeps its addresses), else the defaults for Kafka and the registry and free
    ports for the internal listeners (KRaft controller, Quarkus management).
    """

    STATE_FILE = "state.json"  # proc.HomeState: pids and ports, in home

    def __init__(
        self,
        home: Path | None = None,
        kafka_port: int | None = None,
        registry_port: int | None = None,
        controller_port: int | None = None,
        management_port: int | None = None,
        artifacts: Artifacts | None = None,
        env: Mapping[str, str] | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        self.env: Mapping[str, str] = os.environ if env is None else env
        self.home = (home or default_home(self.env)).resolve()
        self.artifacts = artifacts or Artifacts.from_env(self.env)
        self.host = host
        state = self._load_state()
        k, r = state.get("kafka", {}), state.get("registry", {})
        self.kafka_port = kafka_port or k.get("port") or DEFAULT_KAFKA_PORT
        self.registry_port = registry_port or r.get("port") or DEFAULT_REGISTRY_PORT
        self._controller_port = controller_port or k.get("controller_port")
        self._management_port = management_port or r.get("management_port")

    # -- servers -------------------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.kafka_port}"

    @property
    def registry_url(self) -> str:
        return self._registry(management_port=0).url

    def _kafka(self, controller_port: int) -> KafkaNode:
        return KafkaNode(home=self.home / "kafka", libs=self.artifacts.kafka_libs, node_id=1,
                         port=self.kafka_port, controller_port=controller_port, host=self.host)

    def _registry(self, management_port: int) -> RegistryServer:
        return RegistryServer(home=self.home / "registry", dist=self.artifacts.registry_home,
                              port=self.registry_port, management_port=management_port,
                              bootstrap=self.bootstrap, host=self.host)

    def _running_pid(self, state: dict[str, Any], name: str) -> int | None:
        pid = state.get(name, {}).get("pid")
        return pid if proc.owns(pid, self.marker) else None

    # -- lifecycle -----------------------------------------------------------------------

    def up(self, log: Callable[[str], None] = lambda _msg: None) -> StackInfo:
        """Start whatever is not running, wait until both servers answer, return where."""
        state = self._load_state()
        kafka_pid = self._running_pid(state, "kafka")
        registry_pid = self._running_pid(state, "registry")
        for name, pid, port in (("kafka", kafka_pid, self.kafka_port),
                                ("registry", registry_pid, self.registry_port)):
            if pid is not None and state[name].get("port") != port:
                raise StackError(
                    f"the stack in {self.home} already runs {name} on port "
                    f"{state[name].get('port')}, not {port}; run `rlmesh-stream infra down` "
                    f"first or use another --home."
                )

        controller_port = self._controller_port
        management_port = self._management_port
        # Check every port before starting anything, so a clash leaves nothing half-up.
        if kafka_pid is None:
            proc.check_port_free(self.kafka_port, "Kafka", "--kafka-port", self.host)
            if controller_port is None:
                controller_port = proc.free_port(self.host)
            else:
                proc.check_port_free(controller_port, "Kafka controller", "--controller-port",
                                     self.host)
        if registry_pid is None:
            proc.check_port_free(self.registry_port, "schema registry", "--registry-port",
                                 self.host)
            if management_port is None:
                management_port = proc.free_port(self.host)
            else:
                proc.check_port_free(management_port, "registry management",
                                     "--management-port", self.host)

        kafka_java = find_java(KAFKA_MIN_JAVA, "Kafka", self.env) if kafka_pid is None else None
        registry_java = (find_java(REGISTRY_MIN_JAVA, "Apicurio Registry", self.env)
                         if registry_pid is None else None)
        if (kafka_java or registry_java) and not self.artifacts.is_cached():
            log(f"fetching Kafka and Apicurio Registry into {self.artifacts.cache_dir} ...")
            fetch_started = time.monotonic()
            self.artifacts.ensure()
            log(f"fetched in {time.monotonic() - fetch_started:.1f} s")

        if kafka_java is not None:
            assert controller_port is not None
            state = self._start_kafka(state, kafka_java, controller_port, log)
        else:
            assert kafka_pid is not None
            log(f"kafka already running (pid {kafka_pid}) at {self.bootstrap}")
            # It may still be starting (another `up` moments ago), or hung: wait for an answer.
            self._wait("kafka", kafka_pid, self.home / "kafka" / "kafka.log",
                       KAFKA_READY_TIMEOUT, lambda: kafka_ready(self.bootstrap) is not None)
        self._controller_port = state["kafka"]["controller_port"]

        if registry_java is not None:
            assert management_port is not None
            state = self._start_registry(state, registry_java, management_port, log)
        else:
            assert registry_pid is not None
            log(f"registry already running (pid {registry_pid}) at {self.registry_url}")
            self._wait("schema registry", registry_pid, self.home / "registry" / "registry.log",
                       REGISTRY_READY_TIMEOUT, lambda: registry_ready(self.registry_url))
        self._management_port = state["registry"]["management_port"]
        return self.status()

    def _start_kafka(self, state: dict[str, Any], java: Java, controller_port: int,
                     log: Callable[[str], None]) -> dict[str, Any]:
        node = self._kafka(controller_port)
        node.write_config()
        cluster_id = state.get("cluster_id") or random_cluster_id()
        if not node.is_formatted():
            format_started = time.monotonic()
            node.format_storage(java, cluster_id)
            log(f"formatted Kafka storage in {node.data_dir} "
                f"({time.monotonic() - format_started:.1f} s)")
        log(f"starting kafka on {node.bootstrap} (java {java.major}) ...")
        started = time.monotonic()
        pid = proc.spawn_detached(node.command(java), node.home, node.log_file)
        state.update(cluster_id=cluster_id, kafka={
            "pid": pid, "port": self.kafka_port, "controller_port": controller_port,
            "java": str(java.path), "log": str(node.log_file)})
        self._save_state(state)
        self._wait("kafka", pid, node.log_file, KAFKA_READY_TIMEOUT,
                   lambda: proc.port_open(self.kafka_port, self.host)
                   and kafka_ready(node.bootstrap) is not None)
        state["kafka"]["ready_seconds"] = round(time.monotonic() - started, 1)
        self._save_state(state)
        log(f"kafka ready in {state['kafka']['ready_seconds']} s")
        return state

    def _start_registry(self, state: dict[str, Any], java: Java, management_port: int,
                        log: Callable[[str], None]) -> dict[str, Any]:
        server = self._registry(management_port)
        server.home.mkdir(parents=True, exist_ok=True)
        log(f"starting schema registry on {server.url} (java {java.major}) ...")
        started = time.monotonic()
        pid = proc.spawn_detached(server.command(java), server.home, server.log_file)
        state["registry"] = {"pid": pid, "port": self.registry_port,
                             "management_port": management_port, "java": str(java.path),
                             "log": str(server.log_file)}
        self._save_state(state)
        self._wait("schema registry", pid, server.log_file, REGISTRY_READY_TIMEOUT,
                   lambda: registry_ready(server.url))
        state["registry"]["ready_seconds"] = round(time.monotonic() - started, 1)
        self._save_state(state)
        log(f"schema registry ready in {state['registry']['ready_seconds']} s")
        return state

    def _wait(self, what: str, pid: int, log_file: Path, timeout: float,
              ready: Callable[[], bool]) -> None:
        proc.wait_ready(what, pid, log_file, timeout, ready,
                        exited_hint=" (`rlmesh-stream infra logs`)",
                        timeout_hint=", and `rlmesh-stream infra down` to stop it")

    def down(self, log: Callable[[str], None] = lambda _msg: None) -> list[str]:
        """Stop the servers this home's `up` started (registry first: it uses Kafka)."""
        state = self._load_state()
        stopped: list[str] = []
        for name in ("registry", "kafka"):
            entry = state.get(name)
            if not entry or entry.get("pid") is None:
                continue
            pid = entry["pid"]
            if proc.owns(pid, self.marker):
                log(f"stopping {name} (pid {pid}) ...")
                proc.stop(pid)
                stopped.append(name)
            entry["pid"] = None
        if state:
            self._save_state(state)
        return stopped

    def status(self) -> StackInfo:
        state = self._load_state()
        info = StackInfo(home=str(self.home), bootstrap=self.bootstrap,
                         registry_url=self.registry_url)
        for name, address, port in (("kafka", self.bootstrap, self.kafka_port),
                                    ("registry", self.registry_url, self.registry_port)):
            entry = state.get(name, {})
            pid = self._running_pid(state, name)
            info.servers[name] = ServerStatus(
                port_taken=pid is None and proc.port_open(port, self.host),
                name=name, running=pid is not None, pid=pid, address=address,
                log_file=entry.get("log", str(self.home / name / f"{name}.log")),
                rss_mib=round(r, 1) if pid is not None and (r := proc.rss_mib(pid)) else None,
                java=entry.get("java"),
            )
        return info

    def log_files(self) -> dict[str, Path]:
        return {"kafka": self.home / "kafka" / "kafka.log",
                "registry": self.home / "registry" / "registry.log"}

    def diagnostics(self, log_lines: int = 80, dump_lines: int = 300,
                    dump_timeout: float = 20.0) -> list[tuple[str, str]]:
        """(title, text) pairs for a failure report: each log's tail, the registry's threads.

        Whatever cannot be read (no log yet, registry not running, no jcmd beside its
        java, jcmd failing or slower than `dump_timeout`) is left out; this never raises
        for a missing piece.
        """
        sections: list[tuple[str, str]] = []
        for name, path in (("registry", self.log_files()["registry"]),
                           ("kafka", self.log_files()["kafka"])):
            try:
                text = proc.tail(path, log_lines)
            except OSError:
                continue
            sections.append((f"{name} log (last {log_lines} lines of {path})", text))
        pid = self._running_pid(self._load_state(), "registry")
        dump = proc.jvm_thread_dump(pid, dump_timeout, dump_lines) if pid is not None else None
        if dump is not None:
            sections.append((f"registry thread dump (jcmd {pid} Thread.print, "
                             f"first {dump_lines} lines)", dump))
        return sections

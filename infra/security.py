"""A secured stack: TLS + SASL/SCRAM-SHA-512 on Kafka with ACLs, and the registry behind auth.

What it builds, all on loopback under one home directory:

* a throwaway certificate authority and a server certificate for 127.0.0.1
  (`cryptography`), written as PEM: Kafka reads PEM keystores natively;
* SCRAM-SHA-512 users created at storage-format time (`--add-scram`), so the
  broker never runs a moment without them: `admin` (inter-broker, super user),
  `producer`, `consumer`, `registry` (the registry's own journal access);
* a Kafka node whose client listener is SASL_SSL, whose internal listener is
  SASL_PLAINTEXT (SCRAM) and whose controller listener is SASL_PLAINTEXT
  (PLAIN, because KRaft controllers cannot check SCRAM before the metadata log
  holds the credentials); `StandardAuthorizer` with no "allow if no ACL";
* ACLs: `producer` may write the event topics (LITERAL, one per event type)
  and nothing else; `consumer` may read them, use its groups (prefix
  `rlmesh-stream`) and write its dead-letter topic;
* Apicurio Registry, which has no auth of its own without an OIDC server,
  bound to loopback behind an nginx reverse proxy that terminates TLS, checks
  HTTP basic auth and maps each user to the operations it may do (see
  `nginx_rules`). Users not in the map, and writes by `consumer`, get a JSON
  error in the Confluent format naming the user, the method and the path.

The certificates and users are made in `infra.pki`, the registry's proxy lives in
`infra.registry_proxy`; this module builds the Kafka node, the ACLs and the stack.

Secrets: passwords are random, held in `Credentials` (excluded from repr),
written only to 0600 files (server.properties, the registry's
config/application.properties, the htpasswd file holds hashes) and passed to
`openssl passwd` on stdin, never on a command line that `ps` shows.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlmesh_stream.infra import proc
from rlmesh_stream.infra.errors import StartupError
from rlmesh_stream.infra.java import Java
from rlmesh_stream.infra.kafka import KafkaNode
from rlmesh_stream.infra.pki import USERS, Credentials, Pki, generate_users, make_pki, write_private
from rlmesh_stream.infra.registry import RegistryServer
from rlmesh_stream.infra.registry_proxy import RegistryProxy, nginx_available
from rlmesh_stream.schemas.connection.config import StreamConfig
from rlmesh_stream.schemas.contract.topics import all_topics

SCRAM = "SCRAM-SHA-512"
GROUP_PREFIX = "rlmesh-stream"


# -- users ------------------------------------------------------------------------------------


def _jaas(module: str, creds: Credentials, extra: str = "") -> str:
    return (f'{module} required username="{creds.username}" '
            f'password="{creds.password}"{extra};')


SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"


# -- the Kafka node ---------------------------------------------------------------------------


@dataclass(frozen=True)
class SecureKafkaNode(KafkaNode):
    """A KafkaNode with SASL_SSL for clients, SCRAM between brokers and ACLs enforced.

    `port` (KafkaNode's client port) becomes the internal SASL_PLAINTEXT
    listener that brokers and the registry use; `secure_port` is what clients
    are given. `voters` overrides the single-node quorum for a cluster.
    """

    secure_port: int = 0
    pki: Pki | None = None
    users: dict[str, Credentials] = field(default_factory=dict, repr=False)
    voters: str | None = None

    @property
    def secure_bootstrap(self) -> str:
        return f"{self.host}:{self.secure_port}"

    def properties(self) -> str:
        base = dict(line.split("=", 1) for line in super().properties().splitlines() if line)
        assert self.pki is not None
        admin = self.users["admin"]
        h = self.host
        base.update({
            "controller.quorum.voters": self.voters or base["controller.quorum.voters"],
            "listeners": f"BROKER://{h}:{self.port},CLIENT://{h}:{self.secure_port},"
                         f"CONTROLLER://{h}:{self.controller_port}",
            "advertised.listeners": f"BROKER://{h}:{self.port},CLIENT://{h}:{self.secure_port}",
            "listener.security.protocol.map":
                "BROKER:SASL_PLAINTEXT,CLIENT:SASL_SSL,CONTROLLER:SASL_PLAINTEXT",
            "inter.broker.listener.name": "BROKER",
            "sasl.mechanism.inter.broker.protocol": SCRAM,
            "sasl.mechanism.controller.protocol": "PLAIN",
            "sasl.enabled.mechanisms": SCRAM,
            "listener.name.broker.sasl.enabled.mechanisms": SCRAM,
            "listener.name.client.sasl.enabled.mechanisms": SCRAM,
            "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
            f"listener.name.broker.{SCRAM.lower()}.sasl.jaas.config": _jaas(SCRAM_MODULE, admin),
            f"listener.name.client.{SCRAM.lower()}.sasl.jaas.config": f"{SCRAM_MODULE} required;",
            "listener.name.controller.plain.sasl.jaas.config": _jaas(
                PLAIN_MODULE, admin, f' user_{admin.username}="{admin.password}"'),
            "listener.name.client.ssl.keystore.type": "PEM",
            "listener.name.client.ssl.keystore.location": str(self.pki.server_keystore),
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "allow.everyone.if.no.acl.found": "false",
            "super.users": f"User:{admin.username};User:{self.users['registry'].username}",
        })
        return "".join(f"{k}={v}\n" for k, v in base.items())

    def write_config(self) -> None:
        super().write_config()
        self.properties_file.chmod(0o600)  # it holds the admin password

    def format_storage(self, java: Java, cluster_id: str) -> None:
        """Format with every user's SCRAM credential (arguments in a 0600 file, not argv)."""
        if self.is_formatted():
            return
        scram = [f"{SCRAM}=[name={c.username},password={c.password}]"
                 for c in self.users.values()]
        # StorageTool reads no argument file, so the credentials go on its command line;
        # it runs for a second, as this process's child, before any client can connect.
        cmd = [str(java.path), "-cp", self.classpath(), "kafka.tools.StorageTool", "format",
               "-t", cluster_id, "-c", str(self.properties_file)]
        for entry in scram:
            cmd += ["--add-scram", entry]
        done = subprocess.run(cmd, capture_output=True, text=True, cwd=self.home, check=False)
        if done.returncode != 0:
            raise StartupError(f"formatting secured Kafka storage in {self.data_dir} failed "
                               f"({_redact(done.stderr or done.stdout, self.users)})")


def _redact(text: str, users: dict[str, Credentials]) -> str:
    for c in users.values():
        text = text.replace(c.password, "***")
    return text.strip()[-500:]


def admin_config(bootstrap: str, admin: Credentials) -> dict[str, Any]:
    """librdkafka settings of the super user on the internal SASL_PLAINTEXT listener."""
    return {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": SCRAM, "sasl.username": admin.username,
            "sasl.password": admin.password}


def secured_ready(conf: dict[str, Any], timeout: float = 5.0) -> int | None:
    """Live brokers if the cluster answers an authenticated metadata request, else None."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({**conf, "log_level": 0, "socket.connection.setup.timeout.ms": 2000})
    try:
        md = admin.list_topics(timeout=timeout)
    except Exception:
        return None
    return len(md.brokers) or None


# -- ACLs -------------------------------------------------------------------------------------


def pipeline_acls(topic_prefix: str, producer: str = "producer",
                  consumer: str = "consumer") -> list[Any]:
    """The ACL bindings of the pipeline's two principals (see the module docstring)."""
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    allow, literal = AclPermissionType.ALLOW, ResourcePatternType.LITERAL

    def acl(kind: ResourceType, name: str, user: str, op: AclOperation,
            pattern: ResourcePatternType = literal) -> AclBinding:
        return AclBinding(kind, name, pattern, f"User:{user}", "*", op, allow)

    out = []
    for topic in all_topics(topic_prefix):
        out += [acl(ResourceType.TOPIC, topic, producer, AclOperation.WRITE),
                acl(ResourceType.TOPIC, topic, producer, AclOperation.DESCRIBE),
                acl(ResourceType.TOPIC, topic, consumer, AclOperation.READ),
                acl(ResourceType.TOPIC, topic, consumer, AclOperation.DESCRIBE)]
    dlq = f"{topic_prefix}.dlq"
    for op in (AclOperation.CREATE, AclOperation.WRITE, AclOperation.DESCRIBE):
        out.append(acl(ResourceType.TOPIC, dlq, consumer, op))
    out.append(acl(ResourceType.GROUP, GROUP_PREFIX, consumer, AclOperation.READ,
                   ResourcePatternType.PREFIXED))
    return out


def grant(admin_conf: dict[str, Any], bindings: list[Any], timeout: float = 30.0) -> None:
    """Create ACL bindings and wait until each is in place."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({**admin_conf, "log_level": 4})
    for future in admin.create_acls(bindings, request_timeout=timeout).values():
        future.result(timeout)


@dataclass(frozen=True)
class SecuredRegistryServer(RegistryServer):
    """Apicurio reaching its journal over SCRAM; settings in config/application.properties.

    Quarkus reads `config/application.properties` from its working directory,
    which keeps the registry's Kafka password off the command line.
    """

    user: Credentials | None = field(default=None, repr=False)

    def write_config(self) -> None:
        assert self.user is not None
        jaas = _jaas(SCRAM_MODULE, self.user)
        lines = []
        for client in ("producer", "consumer", "admin"):
            lines += [f"apicurio.kafkasql.{client}.security.protocol=SASL_PLAINTEXT",
                      f"apicurio.kafkasql.{client}.sasl.mechanism={SCRAM}",
                      f"apicurio.kafkasql.{client}.sasl.jaas.config={jaas}"]
        (self.home / "config").mkdir(parents=True, exist_ok=True)
        write_private(self.home / "config" / "application.properties", "\n".join(lines) + "\n")


# -- the whole secured stack ------------------------------------------------------------------


@dataclass
class SecureStack:
    """One secured Kafka node, the registry and its proxy, for tests and demos.

    Every server is this object's child process, bound to 127.0.0.1 on free
    ports under `home`; `stop()` stops all of them (call it from a finalizer).
    """

    home: Path
    kafka_libs: Path
    registry_dist: Path
    kafka_java: Java
    registry_java: Java
    topic_prefix: str = "rlmesh.runtime"
    users: dict[str, Credentials] = field(default_factory=generate_users, repr=False)
    host: str = "127.0.0.1"
    pids: dict[str, int] = field(default_factory=dict)
    node: SecureKafkaNode | None = None
    proxy: RegistryProxy | None = None
    pki: Pki | None = None

    def start(self, log: Callable[[str], None] = lambda _m: None) -> None:
        from rlmesh_stream.infra.kafka import random_cluster_id

        self.pki = make_pki(self.home / "pki", self.host)
        self.node = SecureKafkaNode(
            home=self.home / "kafka", libs=self.kafka_libs, node_id=1,
            port=proc.free_port(self.host), controller_port=proc.free_port(self.host),
            host=self.host, secure_port=proc.free_port(self.host), pki=self.pki,
            users=self.users)
        self.node.write_config()
        self.node.format_storage(self.kafka_java, random_cluster_id(self.kafka_java,
                                                                    self.kafka_libs))
        log(f"starting secured kafka on {self.node.secure_bootstrap} ...")
        self.pids["kafka"] = proc.spawn_detached(self.node.command(self.kafka_java),
                                                 self.node.home, self.node.log_file)
        admin = self.admin_config()
        proc.wait_ready("secured kafka", self.pids["kafka"], self.node.log_file, 120,
              lambda: secured_ready(admin) is not None)
        grant(admin, pipeline_acls(self.topic_prefix))

        upstream = proc.free_port(self.host)
        registry = SecuredRegistryServer(
            home=self.home / "registry", dist=self.registry_dist, port=upstream,
            management_port=proc.free_port(self.host), bootstrap=self.node.bootstrap,
            host=self.host, user=self.users["registry"])
        registry.write_config()
        log("starting registry ...")
        self.pids["registry"] = proc.spawn_detached(registry.command(self.registry_java),
                                                    registry.home, registry.log_file)
        from rlmesh_stream.infra.registry import registry_ready

        proc.wait_ready("registry", self.pids["registry"], registry.log_file, 240,
              lambda: registry_ready(registry.url))
        self.proxy = RegistryProxy(self.home / "proxy", proc.free_port(self.host), upstream,
                                   self.pki, {k: v for k, v in self.users.items()
                                              if k in ("producer", "consumer")},
                                   self.topic_prefix, self.host)
        self.proxy.write_config()
        self.pids["proxy"] = proc.spawn_detached(self.proxy.command(), self.proxy.home,
                                                 self.proxy.home / "nginx.out")
        proc.wait_ready("registry proxy", self.pids["proxy"], self.proxy.log_file, 30,
              lambda: proc.port_open(self.proxy.port, self.host) if self.proxy else False)

    def admin_config(self) -> dict[str, Any]:
        assert self.node is not None
        return admin_config(self.node.bootstrap, self.users["admin"])

    def admin_stream_config(self) -> StreamConfig:
        """The super user on the internal listener (creating topics, granting ACLs)."""
        assert self.node is not None
        admin = self.users["admin"]
        return StreamConfig(bootstrap=self.node.bootstrap, topic_prefix=self.topic_prefix,
                            security_protocol="SASL_PLAINTEXT", sasl_mechanism=SCRAM,
                            sasl_username=admin.username, sasl_password=admin.password)

    def config_for(self, user: str, *, password: str | None = None,
                   registry_user: str | None = None) -> StreamConfig:
        """How `user` connects: SASL_SSL + SCRAM to Kafka, TLS + basic auth to the registry."""
        assert self.node is not None and self.proxy is not None and self.pki is not None
        creds = self.users[user]
        reg = self.users[registry_user or user]
        return StreamConfig(
            bootstrap=self.node.secure_bootstrap, registry_url=self.proxy.url,
            topic_prefix=self.topic_prefix, security_protocol="SASL_SSL",
            sasl_mechanism=SCRAM, sasl_username=creds.username,
            sasl_password=password if password is not None else creds.password,
            ssl_ca_location=str(self.pki.ca_cert), registry_username=reg.username,
            registry_password=password if password is not None else reg.password,
            registry_ca_location=str(self.pki.ca_cert))

    def stop(self) -> None:
        for name in ("proxy", "registry", "kafka"):
            pid = self.pids.pop(name, None)
            if pid is not None:
                proc.stop(pid, timeout=20)


__all__ = ["USERS", "Credentials", "Pki", "RegistryProxy", "SecureKafkaNode", "SecureStack",
           "admin_config", "generate_users", "grant", "make_pki", "nginx_available",
           "pipeline_acls"]

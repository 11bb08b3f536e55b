"""`rlmesh-stream infra up | status | logs | down` on a stack of this module's own.

The commands run as real subprocesses, as a person would run them: the servers must
outlive the `up` that started them, and `down` must find them again from the state
file alone.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from rlmesh_stream.infra.proc import free_port, is_alive
from rlmesh_stream.infra.stack import LocalStack
from rlmesh_stream.schemas.contract.topics import confluent_serde_conf

pytestmark = [pytest.mark.slow, pytest.mark.stack]  # starts stacks of its own

CLI = [sys.executable, "-m", "rlmesh_stream.infra.cli"]


def cli(*args: str, timeout: float = 400) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True,
                          text=True, timeout=timeout, check=False, env=dict(os.environ))


@dataclass
class OwnStack:
    home: Path
    up: subprocess.CompletedProcess[str]

    def status(self) -> dict[str, Any]:
        result = cli("infra", "status", "--json", "--home", str(self.home))
        assert result.returncode == 0, result.stderr
        data: dict[str, Any] = json.loads(result.stdout)
        return data

    def pids(self) -> dict[str, int]:
        return {name: s["pid"] for name, s in self.status()["servers"].items()}


@pytest.fixture(scope="module")
def own_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OwnStack]:
    home = tmp_path_factory.mktemp("own-stack")
    up = cli("infra", "up", "--home", str(home), "--kafka-port", str(free_port()),
             "--registry-port", str(free_port()))
    try:
        assert up.returncode == 0, up.stderr
        yield OwnStack(home, up)
    finally:
        cli("infra", "down", "--home", str(home))


def test_up_prints_the_bootstrap_address_and_the_registry_url(own_stack: OwnStack) -> None:
    status = own_stack.status()
    assert f"bootstrap:    {status['bootstrap']}" in own_stack.up.stdout
    assert f"registry_url: {status['registry_url']}" in own_stack.up.stdout


def test_servers_keep_running_after_up_exits(own_stack: OwnStack) -> None:
    status = own_stack.status()
    assert status["running"] is True
    assert all(is_alive(pid) for pid in own_stack.pids().values())


def test_status_json_says_where_each_server_runs_with_pid_and_memory(
    own_stack: OwnStack,
) -> None:
    status = own_stack.status()
    assert status["bootstrap"].startswith("127.0.0.1:")
    assert status["registry_url"].endswith("/apis/ccompat/v7")
    for server in status["servers"].values():
        assert server["running"] and server["pid"] > 0 and server["rss_mib"] > 0


def test_second_up_reuses_the_healthy_stack(own_stack: OwnStack) -> None:
    before = own_stack.pids()
    again = cli("infra", "up", "--home", str(own_stack.home))
    assert again.returncode == 0, again.stderr
    assert "already running" in again.stderr
    assert own_stack.pids() == before


def test_logs_shows_both_servers_logs(own_stack: OwnStack) -> None:
    result = cli("infra", "logs", "--home", str(own_stack.home), "-n", "20")
    assert result.returncode == 0
    kafka_part, _, registry_part = result.stdout.partition("== registry:")
    kafka_header, *kafka_lines = kafka_part.splitlines()
    assert kafka_header.startswith("== kafka:") and len(kafka_lines) == 20
    assert any("kafka" in line for line in kafka_lines)
    assert len(registry_part.splitlines()) == 21 and "apicurio" in registry_part


def _listening_addresses(pid: int) -> set[str]:
    """host:port of every TCP socket `pid` listens on, from /proc (no `ss` needed)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        target = os.readlink(fd)
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            cols = line.split()
            if cols[3] == "0A" and cols[9] in inodes:  # 0A: LISTEN
                host_hex, port_hex = cols[1].split(":")
                found.add(f"{_ip(host_hex)}:{int(port_hex, 16)}")
    return found


def _ip(host_hex: str) -> str:
    raw = bytes.fromhex(host_hex)
    if len(raw) == 16:  # IPv6: four little-endian words; v4-mapped keeps the v4 in the last
        words = [raw[i:i + 4][::-1] for i in range(0, 16, 4)]
        raw = b"".join(words)
        if raw[:12] == b"\0" * 10 + b"\xff\xff":
            raw = raw[12:]
        else:
            return raw.hex()
    else:
        raw = raw[::-1]
    return ".".join(str(b) for b in raw)


def test_servers_listen_on_loopback_only(own_stack: OwnStack) -> None:
    for name, pid in own_stack.pids().items():
        addresses = _listening_addresses(pid)
        assert addresses, name
        assert all(a.startswith("127.") for a in addresses), (name, addresses)


def test_diagnostics_give_both_logs_tails_and_the_registry_threads(own_stack: OwnStack) -> None:
    """What a failing test's report gets when it ran on the local stack (tests/conftest.py)."""
    sections = dict(LocalStack(own_stack.home).diagnostics(log_lines=10, dump_lines=50))
    titles = list(sections)
    assert titles[0].startswith("registry log (last 10 lines of ")
    assert titles[1].startswith("kafka log (last 10 lines of ")
    assert all(len(sections[t].splitlines()) == 10 for t in titles[:2])
    pid = own_stack.pids()["registry"]
    assert titles[2] == f"registry thread dump (jcmd {pid} Thread.print, first 50 lines)"
    dump = sections[titles[2]].splitlines()
    assert len(dump) == 51 and dump[-1].endswith("more lines)")
    assert any("java.lang.Thread.State" in line for line in dump)


def test_down_leaves_a_process_it_did_not_start_alone(tmp_path: Path) -> None:
    stranger = subprocess.Popen(["sleep", "120"])
    try:
        (tmp_path / "state.json").write_text(json.dumps(
            {"kafka": {"pid": stranger.pid, "port": 1}, "registry": {"pid": None, "port": 2}}))
        result = cli("infra", "down", "--home", str(tmp_path))
        assert result.returncode == 0
        assert "nothing was running" in result.stdout
        assert stranger.poll() is None
    finally:
        stranger.kill()
        stranger.wait()


SCHEMA = json.dumps({"type": "record", "name": "Before", "namespace": "rlmesh.test",
                     "fields": [{"name": "n", "type": "long"}, {"name": "s", "type": "string"}]})


def test_records_written_before_a_restart_still_decode_after_it(own_stack: OwnStack) -> None:
    status = own_stack.status()
    kafka = {"bootstrap.servers": status["bootstrap"]}
    topic = f"restart.{time.time_ns()}"
    ctx = SerializationContext(topic, MessageField.VALUE)
    admin = AdminClient(kafka)
    admin.create_topics([NewTopic(topic, num_partitions=1)])[topic].result(30)
    registry = SchemaRegistryClient({"url": status["registry_url"]})
    schema_id = registry.register_schema(f"{topic}-value", Schema(SCHEMA, "AVRO"))
    records = [{"n": i, "s": f"record {i}"} for i in range(5)]
    producer = Producer(kafka)
    serialize = AvroSerializer(registry, SCHEMA, conf=confluent_serde_conf())
    for record in records:
        producer.produce(topic, value=serialize(record, ctx))
    assert producer.flush(30) == 0
    old_pids = own_stack.pids()

    down = cli("infra", "down", "--home", str(own_stack.home))
    assert down.returncode == 0 and "stopped: registry, kafka" in down.stdout
    assert not any(is_alive(pid) for pid in old_pids.values())
    up = cli("infra", "up", "--home", str(own_stack.home))
    assert up.returncode == 0, up.stderr

    fresh_registry = SchemaRegistryClient({"url": status["registry_url"]})
    assert fresh_registry.get_latest_version(f"{topic}-value").schema_id == schema_id
    consumer = Consumer({**kafka, "group.id": topic, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    deserialize = AvroDeserializer(fresh_registry, conf=confluent_serde_conf())
    decoded: list[dict[str, Any]] = []
    deadline = time.monotonic() + 60
    try:
        while len(decoded) < len(records) and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                decoded.append(deserialize(msg.value(), ctx))
    finally:
        consumer.close()
    assert decoded == records

"""`infra status` tells "not running" apart from "another process holds the port"."""

from __future__ import annotations

import socket
from pathlib import Path

from rlmesh_stream.infra.stack import LocalStack


def test_a_port_held_by_another_process_is_reported_as_taken(tmp_path: Path) -> None:
    with socket.socket() as other:  # another home's broker, say
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        status = LocalStack(tmp_path / "home", kafka_port=port).status()
    kafka = status.servers["kafka"]
    assert (kafka.running, kafka.port_taken) == (False, True)


def test_a_free_port_is_plainly_not_running(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    kafka = LocalStack(tmp_path / "home", kafka_port=port).status().servers["kafka"]
    assert (kafka.running, kafka.port_taken) == (False, False)

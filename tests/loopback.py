"""Loopback ports that misbehave on purpose: one nothing listens on, one that never answers.

Shared by the tests that check how a command or the hook ends when Kafka or the registry
refuses the connection (`closed_port`) or accepts it and then says nothing
(`silent_port`): both bind to 127.0.0.1 only.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator


def closed_port() -> int:
    """A loopback port nothing listens on (a connection to it is refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def silent_port() -> Iterator[int]:
    """A loopback port whose server accepts every connection and never sends a byte.

    Connections are accepted (not left in the backlog) and held open until the end, so a
    client waits on its read timeout however many times it connects."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                held.append(server.accept()[0])
            except OSError:  # the server was closed: stop accepting
                return

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield int(server.getsockname()[1])
    finally:
        server.close()
        for conn in held:
            conn.close()

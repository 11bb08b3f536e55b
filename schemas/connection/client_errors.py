"""librdkafka's log lines and client errors of a command-line client, kept off the terminal.

A broker that cannot be reached makes librdkafka print an error line every few
milliseconds; a command must instead end with one line saying why. `ClientErrors`
gives a client a logger that keeps those lines out of the terminal and an `error_cb`
that remembers the most telling error (the transport's "SSL handshake failed:
connecting to a PLAINTEXT broker listener?" rather than "1/1 brokers are down"), so
the command's one `Error:` line can name it.
"""

from __future__ import annotations

import logging
from typing import Any

from confluent_kafka import KafkaError

LIBRDKAFKA_LOG = logging.getLogger("rlmesh_stream.librdkafka")
LIBRDKAFKA_LOG.addHandler(logging.NullHandler())
LIBRDKAFKA_LOG.propagate = False  # add a handler to this logger to see librdkafka's lines

# librdkafka's guess at a TLS client talking to a plain listener; it adds it to some of the
# handshake failures only (it depends on how far the handshake got), so we add it ourselves.
_PLAINTEXT_GUESS = "connecting to a PLAINTEXT broker listener?"
_TLS_CLOSED = "SSL connection closed by peer"


class ClientErrors:
    """Remembers a client's last telling error; `config()` goes into the client's settings."""

    def __init__(self) -> None:
        self.last = ""

    def config(self) -> dict[str, Any]:
        return {"logger": LIBRDKAFKA_LOG, "error_cb": self.on_error}

    def on_error(self, err: KafkaError) -> None:
        if err.code() != KafkaError._ALL_BROKERS_DOWN or not self.last:
            self.last = str(err.str())

    def explain(self, what: str) -> str:
        """`what`, followed by the last error when there was one."""
        if not self.last:
            return what
        last = self.last
        if _TLS_CLOSED in last and _PLAINTEXT_GUESS not in last:
            last = f"{last} ({_PLAINTEXT_GUESS})"
        return f"{what}; {last}"

"""How every process reaches the stack: settings, shared options, access and client errors.

Both sides and the stack's tools connect to the same Kafka and registry, and `schemas` is
the one package they all import, so the connection lives here: `config` (`StreamConfig`,
from flags or RLMESH_STREAM_* variables), `cli_options` (the click options every command
that talks to the stack takes), `access` (Kafka's refusals of our credentials or rights),
`client_errors` (librdkafka's log lines kept off the terminal) and `redact` (no password
from a URL in any log line).
"""

"""Errors the local stack reports to a person.

Every message is one line that says what went wrong *and what to do*, because
the CLI prints it verbatim (`Error: ...`) and a stack trace helps nobody who
only wanted Kafka running.
"""

from __future__ import annotations

from rlmesh_stream.schemas.errors import RlmeshStreamError


class StackError(RlmeshStreamError):
    """Base class: the stack could not be brought up, inspected or stopped."""

    def __init__(self, message: str) -> None:
        # Keep the promise of a one-line message even when a cause is multi-line.
        super().__init__(" ".join(message.split()))


class PortInUseError(StackError):
    """A port the stack must listen on is already taken by another process."""


class JavaError(StackError):
    """No `java` was found, or only one that is too old for a server."""


class ArtifactError(StackError):
    """The Kafka jars or the registry distribution could not be fetched."""


class StartupError(StackError):
    """A server process started but exited or did not become ready in time."""

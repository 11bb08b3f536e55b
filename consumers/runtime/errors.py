"""The errors that end or pause a consumer run, both under `RlmeshStreamError`."""

from __future__ import annotations

from rlmesh_stream.schemas.errors import RlmeshStreamError


class RegistryDown(RlmeshStreamError):
    """The registry did not answer while decoding: the runtime rewinds and retries."""


class ConsumerError(RlmeshStreamError):
    """The run cannot go on (no Kafka or no topics for --until-end, a registry URL that
    leads to something else); the message says why and what to check.

    Nothing is skipped: the sink holds the offsets of the last checkpoint, so running
    again resumes there."""


class SinkWriteError(ConsumerError):
    """The sink did not take a checkpoint (refused, full, or away for longer than the
    writer retries): nothing of it was applied, or it was and its stored offsets say so.
    The message says what the store answered; the store's own error is the cause."""


__all__ = ["ConsumerError", "RegistryDown", "SinkWriteError"]

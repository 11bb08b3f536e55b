"""The one root of every error rlmesh-stream raises: `RlmeshStreamError`.

It lives here because `schemas/` is the one package both the producer and the consumers
import, so every package's errors can derive from it without importing each other. Someone
embedding the library catches "any rlmesh-stream error" with `except RlmeshStreamError`;
each package keeps its own subclasses where they are raised (`schemas.contract.errors`,
`consumers.runtime.errors`, `consumers.sinks`, `infra.errors`, ...). An error that is also
a kind of built-in error (a `ValueError`, a `ConnectionError`) derives from both, so code
catching the built-in one still does.

The command line turns any of them into one `Error:` line and a non-zero exit;
`RLMESH_STREAM_TRACEBACK=1` shows the traceback behind it (docs/settings.md).
"""

from __future__ import annotations


class RlmeshStreamError(Exception):
    """Any error of rlmesh-stream's own."""


__all__ = ["RlmeshStreamError"]

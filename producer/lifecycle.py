"""Process exit: every live hook flushes within its bounded budget on atexit and on SIGTERM.

A rollout process is usually stopped by its orchestrator with SIGTERM; the
default action kills it without running atexit, losing whatever librdkafka
still holds. We install a SIGTERM handler once (only over the default one,
or chained after a Python handler someone else installed), close every live
hook, then let the signal do what it would have done.
"""

from __future__ import annotations

import atexit
import logging
import os
import signal
import threading
import weakref
from types import FrameType
from typing import Any, Protocol

log = logging.getLogger(__name__)


class Closeable(Protocol):
    def close_for_exit(self) -> None: ...


_live: weakref.WeakSet[Any] = weakref.WeakSet()
_installed = False
_install_lock = threading.Lock()
_previous_sigterm: Any = None


def register(hooks: Closeable, *, signals: bool = True) -> None:
    """Flush `hooks` at interpreter exit (and on SIGTERM when `signals`)."""
    global _installed
    _live.add(hooks)
    with _install_lock:
        if _installed:
            return
        _installed = True
        atexit.register(close_all)
        if signals:
            _install_sigterm()


def unregister(hooks: Closeable) -> None:
    _live.discard(hooks)


def close_all() -> None:
    for hooks in list(_live):
        try:
            hooks.close_for_exit()
        except Exception:  # exit must go on whatever one hook does
            log.exception("rlmesh-stream: closing a hook at exit failed")


def _install_sigterm() -> None:
    global _previous_sigterm
    if threading.current_thread() is not threading.main_thread():
        return  # signal handlers can only be set from the main thread
    previous = signal.getsignal(signal.SIGTERM)
    if previous is signal.SIG_IGN:
        return
    _previous_sigterm = previous
    signal.signal(signal.SIGTERM, _on_sigterm)


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    close_all()
    previous = _previous_sigterm
    if callable(previous):
        previous(signum, frame)
        return
    # Default action: die by the signal, as the process would have without us.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)

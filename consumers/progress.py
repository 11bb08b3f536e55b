"""Progress of a consumer: events, events/s and lag, as a bar on a terminal, lines otherwise.

rich draws the bar; it is imported only when there is a terminal to draw on (a
consumer run by a service manager or a script pays nothing for it: it was a tenth of
an empty run's start-up).
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from rich.live import Live
    from rich.text import Text


class Progress:
    """Rate-limited progress reporting; `update` is cheap enough to call every poll."""

    def __init__(self, label: str, stream: TextIO | None = None,
                 interval: float | None = None) -> None:
        self.label = label
        self.stream = stream or sys.stderr
        self.terminal = _is_terminal(self.stream)
        self.interval = interval if interval is not None else (0.2 if self.terminal else 5.0)
        self._start = time.monotonic()
        self._last = 0.0
        self._events = 0
        self._lag: int | None = None
        self._note = ""
        self._live: Live | None = None
        if self.terminal:
            from rich.console import Console
            from rich.live import Live

            self._live = Live(self._render(), console=Console(file=self.stream),
                              transient=False, auto_refresh=False)
            self._live.start()

    def note(self, text: str) -> None:
        """A one-off message (e.g. the registry is down), shown at once."""
        self._note = text
        if self._live is not None:
            self._live.update(self._render(), refresh=True)
        else:
            print(f"{self.label}: {text}", file=self.stream, flush=True)

    def update(self, events: int, lag: int | None) -> None:
        if events != self._events:
            self._note = ""
        self._events, self._lag = events, lag
        now = time.monotonic()
        if now - self._last < self.interval:
            return
        self._last = now
        if self._live is not None:
            self._live.update(self._render(), refresh=True)
        else:
            print(self.line(), file=self.stream, flush=True)

    def line(self) -> str:
        elapsed = max(time.monotonic() - self._start, 1e-9)
        lag = "?" if self._lag is None else str(self._lag)
        return (f"{self.label}: {self._events} events, {self._events / elapsed:,.0f} events/s, "
                f"lag {lag}")

    def _render(self) -> Text:
        from rich.text import Text

        done = self._events
        total = done + (self._lag or 0)
        width = 30
        filled = width if total == 0 else int(width * done / total)
        bar = "━" * filled + "╺" + " " * max(0, width - filled - 1)
        text = Text(f"{bar} {self.line()}")
        if self._note:
            text.append(f"  ({self._note})", style="yellow")
        return text

    def close(self) -> None:
        if self._live is not None:
            self._live.update(self._render(), refresh=True)
            self._live.stop()
        else:
            print(self.line(), file=self.stream, flush=True)


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or closed
        return False

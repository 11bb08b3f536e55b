"""Progress of a consumer: events, events/s, lag and the time the lag will take at that rate
(ETA), and what the checkpoints wrote (episodes completed, lane steps; or, for a consumer
that decides what it writes, such as the dataset export, its own words from `count_with`:
episodes exported and skipped), as a bar on a terminal, lines otherwise.

rich draws the bar; it is imported only when there is a terminal to draw on (a
consumer run by a service manager or a script pays nothing for it: it was a tenth of
an empty run's start-up).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TextIO

from rlmesh_stream.consumers.tables import EPISODES
from rlmesh_stream.schemas.contract.events import EpisodeCompletedEvent
from rlmesh_stream.schemas.contract.topics import EventType

if TYPE_CHECKING:
    from rich.live import Live
    from rich.text import Text

    from rlmesh_stream.consumers.runtime.options import CheckpointInfo


_EPISODE_COLUMNS = EPISODES.column_names
_STEP_COUNT = _EPISODE_COLUMNS.index("step_count")


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
        self._episodes = 0  # episode_completed records checkpointed
        self._lane_steps = 0  # real lane steps (not autoreset rolls) checkpointed
        self._written: Callable[[], str] | None = None  # `count_with`'s
        self._closed: str | None = None  # the counts of the last line `close` showed
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

    def count_with(self, written: Callable[[], str]) -> None:
        """What the checkpoints wrote, as `written()` words it (read at each refresh), in
        place of the `episode_completed` records counted: for a consumer whose output is
        not one row per record read (the export writes some episodes, skips others)."""
        self._written = written

    def checkpointed(self, info: CheckpointInfo) -> None:
        """Count what one committed checkpoint wrote (its records, once each, whichever
        builders read them): the episodes completed, and their lane steps (each
        `episode_completed` carries its `step_count`; the episodes builder reads it packed,
        in the episodes table's column order)."""
        seen: set[tuple[str, int, int]] = set()
        for records in info.records_by_builder.values():
            for record in records:
                where = (record.topic, record.partition, record.offset)
                if record.event_type is not EventType.EPISODE_COMPLETED or where in seen:
                    continue
                seen.add(where)
                self._episodes += 1
                if isinstance(record.event, EpisodeCompletedEvent):
                    self._lane_steps += record.event.step_count
                elif record.values is not None and len(record.values) == len(_EPISODE_COLUMNS):
                    self._lane_steps += int(record.values[_STEP_COUNT] or 0)

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
        rate = self._events / elapsed
        lag = "?" if self._lag is None else str(self._lag)
        text = f"{self.label}: {self._events} events, {rate:,.0f} events/s, lag {lag}"
        if self._lag:
            text += f" (ETA {_duration(self._lag / rate)})" if rate > 0 else " (ETA ?)"
        return text + self._counts()

    def _counts(self) -> str:
        if self._written is not None:
            return f"; {self._written()}"
        if self._episodes or self._lane_steps:
            return f"; written: {self._episodes} episodes, {self._lane_steps} lane steps"
        return ""

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
        """The last line. Closing again (after work done once the reading ended: the
        export's decisions on the episodes still open) prints it again if its counts
        changed."""
        counts = self._counts()
        if self._live is not None and self._live.is_started:
            self._live.update(self._render(), refresh=True)
            self._live.stop()
        elif counts != self._closed:
            print(self.line(), file=self.stream, flush=True)
        self._closed = counts


def _duration(seconds: float) -> str:
    """`42 s`, `3 min 05 s`, `2 h 10 min`: as long as an ETA needs to be read at a glance."""
    whole = int(seconds + 0.5)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    return f"{whole // 3600} h {whole % 3600 // 60:02d} min"


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or closed
        return False

"""Progress output for terminals and for logs: done/total, rate and time left.

On a terminal a progress line is redrawn in place (a carriage return);
anywhere else (a file, a pipe, a cluster job's log, CI) the output is plain
lines, without carriage returns or ANSI escapes, each with the time left.
Training (`training.callbacks.PlainProgressLogger`) and translation
(`LineProgress`) use the same pieces.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

__all__ = [
    "LineProgress",
    "format_duration",
    "is_terminal",
    "progress_bar",
    "seconds_left",
]


def is_terminal(stream: Any) -> bool:
    """Whether `stream` is an open terminal (where a line may be redrawn
    with carriage returns); False for files, pipes and closed streams."""
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # a closed stream
        return False


def format_duration(seconds: float) -> str:
    """`seconds` as ``H:MM:SS`` (``0:01:23``)."""
    minutes, seconds = divmod(int(max(seconds, 0)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}"


def seconds_left(done: int, total: int | None, elapsed: float) -> float | None:
    """The time left at the mean rate so far: `elapsed` seconds for `done`
    of `total` units; None before the first unit or without a total."""
    if not total or done <= 0 or elapsed <= 0:
        return None
    return max(total - done, 0) * elapsed / done


def progress_bar(done: int, total: int, width: int = 20) -> str:
    """``[#####---------------]``: `done` of `total` in `width` characters."""
    filled = min(width, max(0, width * done // total)) if total > 0 else 0
    return "[" + "#" * filled + "-" * (width - filled) + "]"


class LineProgress:
    """A progress report for `total` units (sentences, lines) on `stream`.

    On a terminal one line is redrawn in place (at most every
    `redraw_seconds`); otherwise a plain line is written each time another
    tenth of the units is done, and at the end, for example

    ```text
    300/1000 sentences  41.2 sentences/s  elapsed 0:00:07  eta 0:00:17
    ```

    Args:
        total: the number of units.
        unit: their name, plural (``"sentences"``).
        stream: where the lines go (``None``: ``sys.stdout`` when written).
        terminal: redraw in place; ``None``: whether `stream` is a terminal.
        clock: seconds, for the rate (``time.monotonic``).
    """

    def __init__(
        self,
        total: int,
        unit: str = "sentences",
        stream: TextIO | None = None,
        terminal: bool | None = None,
        clock: Callable[[], float] = time.monotonic,
        redraw_seconds: float = 0.1,
    ) -> None:
        self.total = total
        self.unit = unit
        self._stream = stream
        self.terminal = is_terminal(self.stream) if terminal is None else bool(terminal)
        self._clock = clock
        self._start = clock()
        self._redraw_seconds = redraw_seconds
        self._last_draw: float | None = None
        self._width = 0
        self._next_tenth = 1
        self._finished = False

    @property
    def stream(self) -> TextIO:
        """Where the lines go (standard output as it is when written)."""
        return sys.stdout if self._stream is None else self._stream

    def line(self, done: int) -> str:
        """The progress text of `done` units (without line end)."""
        elapsed = self._clock() - self._start
        parts = [f"{done}/{self.total} {self.unit}"]
        if self.terminal:
            parts[0] += " " + progress_bar(done, self.total)
        if done > 0 and elapsed > 0:
            parts.append(f"{done / elapsed:.1f} {self.unit}/s")
        parts.append(f"elapsed {format_duration(elapsed)}")
        left = seconds_left(done, self.total, elapsed)
        if left is not None and done < self.total:
            parts.append(f"eta {format_duration(left)}")
        return "  ".join(parts)

    def update(self, done: int) -> None:
        """Reports that `done` units are done (the last call: `total`)."""
        if self._finished:
            return
        finished = done >= self.total
        if self.terminal:
            now = self._clock()
            if (
                not finished
                and self._last_draw is not None
                and now - self._last_draw < self._redraw_seconds
            ):
                return
            self._last_draw = now
            text = self.line(done)
            padding = " " * max(self._width - len(text), 0)
            self._width = len(text)
            self.stream.write("\r" + text + padding + ("\n" if finished else ""))
        else:
            tenth = 10 * done // self.total if self.total > 0 else 10
            if tenth < self._next_tenth and not finished:
                return
            self._next_tenth = tenth + 1
            self.stream.write(self.line(done) + "\n")
        self._finished = finished
        self.stream.flush()

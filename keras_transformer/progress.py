"""Progress output for terminals and for logs: done/total, rate and time left.

On a terminal a progress line is redrawn in place (a carriage return);
anywhere else (a file, a pipe, a cluster job's log, CI) the output is plain
lines, without carriage returns or ANSI escapes, each with the time left.
Training (`training.progress_logger.PlainProgressLogger`) and translation
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


class RedrawnLine:
    """One terminal line redrawn in place (a carriage return, padded over
    the longer text before it), at most every `redraw_seconds`.

    Args:
        stream_of: returns the stream to draw on (looked up at each draw, so
            a replaced ``sys.stdout`` is followed).
        redraw_seconds: the least time between two draws (`due`).
    """

    def __init__(self, stream_of: Callable[[], TextIO], redraw_seconds: float) -> None:
        self._stream_of = stream_of
        self.redraw_seconds = redraw_seconds
        self._last_draw: float | None = None
        self._width = 0

    def due(self, now: float) -> bool:
        """Whether `redraw_seconds` have passed since the last draw."""
        return self._last_draw is None or now - self._last_draw >= self.redraw_seconds

    def draw(self, text: str, now: float) -> None:
        """Writes `text` over the line drawn before."""
        stream = self._stream_of()
        stream.write("\r" + text + " " * max(self._width - len(text), 0))
        stream.flush()
        self._last_draw, self._width = now, len(text)

    def end(self) -> None:
        """Moves past the drawn line (kept on screen), if one was drawn."""
        if self._last_draw is not None:
            stream = self._stream_of()
            stream.write("\n")
            stream.flush()
            self._last_draw, self._width = None, 0


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
        self._line = RedrawnLine(lambda: self.stream, redraw_seconds)
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

    def part(self, offset: int) -> Any:
        """A view of this report for a part of the units after the first
        `offset`: its ``update(done)`` reports ``offset + done``."""
        return _Part(self, offset)

    def update(self, done: int) -> None:
        """Reports that `done` units are done (the last call: `total`)."""
        if self._finished:
            return
        finished = done >= self.total
        if self.terminal:
            now = self._clock()
            if not (finished or self._line.due(now)):
                return
            self._line.draw(self.line(done), now)
            if finished:
                self._line.end()
        else:
            tenth = 10 * done // self.total if self.total > 0 else 10
            if tenth < self._next_tenth and not finished:
                return
            self._next_tenth = tenth + 1
            self.stream.write(self.line(done) + "\n")
        self._finished = finished
        self.stream.flush()


class _Part:
    """`LineProgress.part`: a part's progress, reported in the whole's."""

    def __init__(self, whole: LineProgress, offset: int) -> None:
        self.whole = whole
        self.offset = offset

    def update(self, done: int) -> None:
        self.whole.update(self.offset + done)

"""Progress output: plain lines with the time left, or a line redrawn in place."""

from __future__ import annotations

import io
import re

import pytest

from keras_transformer.progress import (
    LineProgress,
    format_duration,
    is_terminal,
    progress_bar,
    seconds_left,
)

ESCAPES = re.compile(r"[\r\b\x1b]")


class _Clock:
    """Seconds that advance by `step` at each reading."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def test_time_left_is_the_mean_rate_so_far():
    assert seconds_left(25, 100, 10.0) == 30.0
    assert seconds_left(100, 100, 10.0) == 0.0
    assert seconds_left(0, 100, 10.0) is None  # no rate yet
    assert seconds_left(5, None, 10.0) is None  # no total
    assert format_duration(3725.9) == "1:02:05"
    assert progress_bar(1, 4, width=8) == "[##------]"


def test_lines_in_a_log_carry_no_escapes_and_an_eta():
    stream = io.StringIO()
    progress = LineProgress(
        1000, "sentences", stream=stream, terminal=False, clock=_Clock(1.0)
    )
    for done in range(0, 1001, 64):
        progress.update(done)
    progress.update(1000)
    progress.update(1000)  # once finished, nothing more
    output = stream.getvalue()
    assert not ESCAPES.search(output), repr(output)
    lines = output.splitlines()
    # One line per tenth of the sentences, and the last.
    assert [line.split()[0] for line in lines] == [
        "128/1000", "256/1000", "320/1000", "448/1000", "512/1000",
        "640/1000", "704/1000", "832/1000", "960/1000", "1000/1000",
    ]  # fmt: skip
    pattern = r"\d+/1000 sentences  [\d.]+ sentences/s  elapsed \d:\d\d:\d\d"
    assert all(re.fullmatch(pattern + r"  eta \d:\d\d:\d\d", x) for x in lines[:-1])
    assert re.fullmatch(pattern, lines[-1])  # done: no eta


def test_a_terminal_gets_one_redrawn_line():
    stream = io.StringIO()
    progress = LineProgress(
        4, "lines", stream=stream, terminal=True, clock=_Clock(1.0), redraw_seconds=0
    )
    for done in range(1, 5):
        progress.update(done)
    output = stream.getvalue()
    assert output.count("\r") == 4 and output.endswith("\n")
    assert output.count("\n") == 1
    assert "1/4 lines [#####---------------]" in output and "eta 0:00:0" in output


@pytest.mark.parametrize("tty", [True, False])
def test_the_stream_decides_by_default(tty):
    class Stream(io.StringIO):
        def isatty(self) -> bool:
            return tty

    stream = Stream()
    assert is_terminal(stream) is tty
    assert LineProgress(3, stream=stream).terminal is tty
    closed = io.StringIO()
    closed.close()  # its isatty() raises ValueError
    assert not is_terminal(closed)

"""Lines typed at a terminal, each answered as soon as it is entered.

``translate``, ``score`` and ``classify`` read a file or a pipe whole, but a
user typing at a terminal would see nothing until Ctrl-D; there each line is
answered when Enter is pressed (`answer_typed_lines`). Pure Python, as the
rest of ``cli/``: the answering function brings the model.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Callable, Iterator, Sequence

from keras_transformer.cli._common import warn

__all__ = ["answer_typed_lines"]


def answer_typed_lines(
    command: str,
    prompt: str,
    output: str | os.PathLike[str],
    answer: Callable[[int, str], Sequence[str] | None],
) -> None:
    """Answers each line typed at the terminal until end of input (Ctrl-D,
    or Ctrl-C, which ends the typing as Ctrl-D does).

    `answer(number, line)` gives the output lines of typed line `number`
    (from 1), or None for a line it skips (after its own warning); a line
    that is not UTF-8 is skipped with a warning. A skipped line gives one
    empty output line, so that the output keeps a line per typed line where
    it goes to a file (``> FILE`` too). With `output` other than ``-`` the
    lines are written there at the end (whole, as for a file's lines)
    instead of printed.
    """
    from keras_transformer.translation import write_lines

    to_file = str(output) != "-"
    written: list[str] = []
    with until_ctrl_c():
        for number, line in typed_lines(command, prompt):
            lines = None if line is None else answer(number, line)
            lines = [""] if lines is None else list(lines)
            if to_file:
                written.extend(lines)
            else:
                print(*lines, sep="\n", flush=True)
    if to_file:
        write_lines(output, written)


def typed_lines(command: str, prompt: str) -> Iterator[tuple[int, str | None]]:
    """The lines typed at a terminal, numbered from 1, each as soon as it is
    entered (reading them all first would answer nothing until Ctrl-D), after
    a line saying what to type (`prompt`); None for a line that is not
    UTF-8, with a warning."""
    print(
        f"keras-transformer {command}: {prompt}; Ctrl-D (or Ctrl-C) ends.",
        file=sys.stderr,
    )
    for number, raw in enumerate(sys.stdin.buffer, start=1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            warn(command, f"line {number} is not valid UTF-8: skipped.")
            yield number, None
        else:
            yield number, line.rstrip("\n").removesuffix("\r")


@contextlib.contextmanager
def until_ctrl_c() -> Iterator[None]:
    """Around the reading of `typed_lines`: Ctrl-C ends the typing as Ctrl-D
    does (SIGTERM, a `CommandInterrupted` of another signal, still stops the
    command)."""
    try:
        yield
    except KeyboardInterrupt as interrupt:
        if getattr(interrupt, "signum", signal.SIGINT) != signal.SIGINT:
            raise
        print(file=sys.stderr)

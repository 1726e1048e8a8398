"""The signals that stop a command, and what a stopped command keeps.

SIGINT (Ctrl-C) and SIGTERM (a scheduler's stop) raise `CommandInterrupted`
inside `stop_on_signals`, so that a command ends with one line that says
what it kept (`CommandInterrupted.kept`) and exits with 128 + the signal's
number, as a shell reports a process it ended.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from typing import Any

#: The signals that stop a command, and the exit status each one gives
#: (128 + the signal's number, as a shell reports a process it ended).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class CommandInterrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM reached a command (outside the updates of ``train``).

    A `KeyboardInterrupt`, so that no ``except Exception`` of the library
    swallows it.

    Attributes:
        signum: the signal's number.
        kept: what the stopped command keeps of its work, as the end of the
            line it stops with (``translate``: "after line 8 of the input,
            whose translations are in ..."); None when it keeps nothing.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.kept: str | None = None


def raise_interrupted(signum: int, frame: Any) -> None:
    """The handler `stop_on_signals` installs."""
    raise CommandInterrupted(signum)


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """SIGINT and SIGTERM raise `CommandInterrupted` in the block.

    Without it SIGTERM ends the process at once, silently (exit 143), and
    SIGINT raises a bare `KeyboardInterrupt`. The previous handlers are
    restored on exit. Outside the main thread it does nothing.
    """
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    for signum in STOP_SIGNALS:
        signal.signal(signum, raise_interrupted)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)


__all__ = ["STOP_SIGNALS", "CommandInterrupted", "raise_interrupted", "stop_on_signals"]

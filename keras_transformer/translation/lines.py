"""Line-aligned text: UTF-8 files and the checks on lists of lines.

`read_lines` / `write_lines` read and write one sentence per line (standard
input and output for ``-``); `check_lines` and `check_line_pairs` refuse,
in one line, what is not a list of strings or not one reference per line;
`PartialOutput` saves a long command's output lines as they are made.
"""

from __future__ import annotations

import gzip
import json
import os
import sys
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from keras_transformer.files import (
    FileWriteError,
    FolderLock,
    FolderLockedError,
    check_utf8_start,
    fsync_directory,
    short_error,
    write_atomically,
    write_error,
)
from keras_transformer.source_limits import describe_lines
from keras_transformer.validation import check_lines

#: The error of `evaluate` (and `Translator.evaluate`) when the counts differ.
SOURCES_MISMATCH = (
    "evaluate got {lines} source sentences but {references} references; pass one "
    "reference per source, in the same order."
)


def refuse_empty_pairs(
    sources: Sequence[str],
    references: Sequence[str],
    places: tuple[str, str] = ("source{s} {lines}", "reference{s} {lines}"),
) -> None:
    """A `ValueError` (one line) naming the test pairs, counted from 1, whose
    source or reference is empty or blank: its translation would be scored
    against nothing (or nothing against its reference), and BLEU would hide
    a misaligned file. `places` words them for sources and references
    (``{lines}``: their numbers, ``{s}``: a plural's s)."""
    for place, lines in zip(places, (sources, references), strict=True):
        empty = [number for number, line in enumerate(lines, 1) if not line.strip()]
        if empty:
            many = len(empty) > 1
            where = place.format(lines=describe_lines(empty), s="s" if many else "")
            raise ValueError(
                f"{where} (counting from 1) {'are' if many else 'is'} empty: every "
                "test pair needs a source and a reference. Remove the pair from "
                "both, or fix their alignment."
            )


def check_line_pairs(
    name: str, lines: Any, references: Any, mismatch: str
) -> tuple[list[str], list[str]]:
    """`lines` and `references` as lists of strings (`check_lines`), one
    reference per line; else the `ValueError` `mismatch`, formatted with the
    two counts (``{lines}``, ``{references}``)."""
    lines = check_lines(name, lines)
    references = check_lines("references", references)
    if len(lines) != len(references):
        raise ValueError(mismatch.format(lines=len(lines), references=len(references)))
    return lines, references


def read_lines(path: str | os.PathLike[str] | None) -> list[str]:
    """The lines of a UTF-8 text file (or of standard input for None / "-"),
    gzip-compressed or not (the data sets' ``.gz`` files; told by their
    first bytes, not by the name).

    Lines are split on ``"\\n"`` only (a trailing ``"\\r"`` is removed), so the
    count matches ``wc -l``; a final line without newline counts too.
    """
    if path is None or str(path) == "-":
        data = sys.stdin.buffer.read()
        name = "standard input"
    else:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"{path} does not exist (or is not a file).")
        data = path.read_bytes()
        name = str(path)
    data = _gunzipped(name, data)
    check_utf8_start(name, data)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise ValueError(
            f"{name} is not valid UTF-8 (line {line}, byte {e.start}). Convert it, "
            "e.g. with `iconv -f latin1 -t utf-8`."
        ) from None
    if text.startswith("\ufeff"):
        text = text[1:]
    if not text:
        return []
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


#: The first two bytes of every gzip file (RFC 1952).
_GZIP_MAGIC = b"\x1f\x8b"


def _gunzipped(name: str, data: bytes) -> bytes:
    """`data` decompressed where it is gzip, else as it is; a damaged or
    cut gzip file is one `ValueError` naming it."""
    if not data.startswith(_GZIP_MAGIC):
        return data
    try:
        return gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as e:
        raise ValueError(
            f"{name} is gzip-compressed but cannot be decompressed "
            f"({short_error(e)}): it is damaged or cut short. Copy it again, "
            "or pass the uncompressed text."
        ) from None


def write_lines(path: str | os.PathLike[str] | None, lines: Sequence[str]) -> None:
    """Writes one line per string, UTF-8 (standard output for None / "-").

    A file is written whole or not at all (`write_atomically`).

    Raises:
        FileWriteError: one line naming the file when it cannot be written.
    """
    data = "".join(f"{line}\n" for line in lines).encode("utf-8")
    if path is None or str(path) == "-":
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        return
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise write_error(path, e) from e
    write_atomically(path, data)


class PartialOutput:
    """The output lines of a long command, saved as they are made, so that a
    stopped command (Ctrl-C, a kill, a full disk) loses only the lines it
    was making: ``OUTPUT.partial`` holds them, ``OUTPUT.partial.json`` says
    how many input lines they answer, and of what (`signature`: the input,
    the settings and the model, as the caller sums them up). Run again with
    the same `signature`, the command goes on after those lines; `finish`
    renames the whole to ``OUTPUT``. One writer at a time (``.OUTPUT.lock``).

    Args:
        path: the output file.
        signature: what the lines are made of; a partial output of another
            signature is of another command, and is started again.
        command: the command, as a second writer's refusal names it.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        signature: str,
        command: str = "keras-transformer translate",
    ) -> None:
        self.path = Path(path)
        self.lines_path = self.path.with_name(self.path.name + ".partial")
        self.state_path = self.path.with_name(self.path.name + ".partial.json")
        self.signature = signature
        self.done = 0
        self.lock = FolderLock(
            self.path,
            command,
            lock_file=self.path.with_name(f".{self.path.name}.lock"),
            remove_when_released=True,
            another="another output file",
        )

    def start(self) -> tuple[int, bool]:
        """Takes the lock; returns the input lines already answered by an
        earlier run of the same signature (0 for none), and whether a
        partial output of another signature was dropped."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.lock.acquire()
        except (FolderLockedError, IsADirectoryError):
            raise  # another writer, or a folder where the lock file goes
        except OSError as e:  # a read-only folder, one that takes no new file
            raise write_error(self.path, e) from e  # the output, not its lock
        state = self._state()
        size = self.lines_path.stat().st_size if self.lines_path.is_file() else -1
        if state.get("signature") == self.signature and 0 <= state["bytes"] <= size:
            # Lines appended after the last state (a kill between the two
            # writes) are made again.
            os.truncate(self.lines_path, state["bytes"])
            self.done = state["lines"]
            return self.done, False
        # A state without its lines is what a kill between `finish`'s rename
        # and its removal of the state leaves (or a partial output removed by
        # hand): nothing is dropped, the command starts as after a finished run.
        dropped = size > 0 or (bool(state) and size == 0)
        self._write(b"", 0, mode="wb")
        return 0, dropped

    def _state(self) -> dict[str, Any]:
        try:
            state = json.loads(self.state_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        valid = isinstance(state, dict) and all(
            isinstance(state.get(key), int) for key in ("lines", "bytes")
        )
        return state if valid else {}

    def _write(self, data: bytes, done: int, mode: str = "ab") -> None:
        try:
            with open(self.lines_path, mode) as file:
                file.write(data)
                file.flush()
                os.fsync(file.fileno())
            state = {
                "signature": self.signature,
                "lines": done,
                "bytes": self.lines_path.stat().st_size,
            }
            write_atomically(self.state_path, json.dumps(state) + "\n")
        except OSError as e:
            kept = (
                f"{self.lines_path} keeps the output of the first {self.done} "
                "input lines"
                if self.done
                else "nothing made so far is lost"
            )
            # The state's own write error (`write_atomically`) is told once,
            # with what the partial output keeps.
            cause = e.__cause__ if isinstance(e, FileWriteError) else e
            failed = e.filename if isinstance(e, FileWriteError) else self.lines_path
            raise write_error(failed, cause or e, kept=kept) from e
        self.done = done

    def append(self, lines: Sequence[str], done: int) -> None:
        """Adds `lines`, the output up to input line `done` (counted from 1)."""
        self._write("".join(f"{line}\n" for line in lines).encode("utf-8"), done)

    def lines(self) -> list[str]:
        """The output lines kept so far (of the first `done` input lines)."""
        try:
            text = self.lines_path.read_bytes().decode("utf-8")
        except (OSError, UnicodeDecodeError):
            return []
        # Split at line feeds only: an output line may hold a form feed or a
        # line separator, which `str.splitlines` would also split at.
        return text.split("\n")[:-1]

    def finish(self) -> None:
        """``OUTPUT.partial`` becomes ``OUTPUT``; the state goes."""
        try:
            os.replace(self.lines_path, self.path)
            self.state_path.unlink(missing_ok=True)
            fsync_directory(self.path.parent)
        except OSError as e:
            raise write_error(self.path, e, kept=f"{self.lines_path} is whole") from e
        finally:
            self.lock.release()

    def stop(self) -> None:
        """Releases the lock of a command stopped before `finish`."""
        self.lock.release()


__all__ = [
    "PartialOutput",
    "SOURCES_MISMATCH",
    "check_line_pairs",
    "refuse_empty_pairs",
    "check_lines",
    "read_lines",
    "write_lines",
]

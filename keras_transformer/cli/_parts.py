"""A long command's output lines, saved as they are made.

``translate --input FILE --output OUT``, ``score ... --output OUT`` and
``evaluate`` (its translations of the test set) work CHUNK_LINES input lines
at a time and append each part's output lines to ``OUT.partial`` as soon as
it is done (`output_in_parts`, on
`keras_transformer.translation.lines.PartialOutput`): a command stopped by
Ctrl-C, a kill or a full disk keeps them, and the same command run again
(the same `command_signature`: input, settings and model files) goes on
after them.
"""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from keras_transformer.cli._common import parser_defaults, warn
from keras_transformer.cli._signals import CommandInterrupted

if TYPE_CHECKING:  # imported where it is used: cli/ loads the standard library
    from keras_transformer.translation.lines import PartialOutput

#: Input lines translated (or pairs scored) at a time (at least; 4 batches
#: if more): written to standard output, or saved to ``OUTPUT.partial``
#: (`output_in_parts`), as each part is done.
CHUNK_LINES = 1000

#: What a command holds while it writes its output (a lock), made anew for
#: each write.
Writing = Callable[[], contextlib.AbstractContextManager[Any]]


def add_line_by_line_arguments(
    parser: argparse.ArgumentParser,
    *,
    input_file: str,
    item: str,
    done: str,
    output: str,
    input_group: Any | None = None,
) -> None:
    """``--input``, ``--output`` and ``--no-progress`` of a command that
    answers its input line by line (translate, classify, score) and goes on
    from ``OUTPUT.partial`` when run again.

    Args:
        parser: the command's parser.
        input_file: what ``--input`` holds (``"sentences, one per line"``).
        item: one input line's noun, whose plural adds an s (``"review"``).
        done: what the command does to one (``"classified"``).
        output: what ``--output`` receives (``"one line per review: ..."``).
        input_group: the argument group of ``--input`` (default: `parser`).
    """
    (input_group or parser).add_argument(
        "--input",
        default="-",
        help=f"File of {input_file} (default: standard input; typed at a "
        f"terminal, each {item} is {done} when Enter is pressed).",
    )
    parser.add_argument(
        "--output",
        default="-",
        help=f"Where to write {output} (default: standard output). Saved to "
        "OUTPUT.partial as they are made: a stopped command run again goes on "
        f"after the {item}s it had {done}.",
    )
    parser.add_argument(
        "--no-progress",
        action="store_true",
        help=f"No progress bar (shown on standard error when the {item}s come "
        "from files).",
    )


class OutputParts:
    """What `output_in_parts` yields: the parts of the input still to do
    (`ranges`) and where each part's output lines go (`write`).

    Attributes:
        partial: the `PartialOutput` of ``OUTPUT`` (None: standard output).
        start: the input lines an earlier run of the same command already
            answered (0 for none).
        total: the input lines.
    """

    def __init__(
        self,
        partial: PartialOutput | None,
        start: int,
        total: int,
        writing: Writing = contextlib.nullcontext,
    ) -> None:
        self.partial = partial
        self.start = start
        self.total = total
        self._writing = writing

    def kept(self) -> list[str]:
        """The output lines of the `start` input lines an earlier run of the
        same command answered (none on standard output)."""
        return [] if self.partial is None else self.partial.lines()

    def ranges(self, batch_size: int) -> Iterator[tuple[int, int]]:
        """``(first, last)`` input line indices of each part left, in order:
        CHUNK_LINES lines, or 4 batches of `batch_size` if more."""
        chunk = max(CHUNK_LINES, 4 * batch_size)
        for first in range(self.start, self.total, chunk):
            yield first, min(first + chunk, self.total)

    def write(self, lines: Sequence[str], done: int) -> None:
        """Writes a part's output `lines`, the output up to input line `done`
        (counted from 1): to standard output, or appended to ``OUTPUT.partial``."""
        if self.partial is None:
            from keras_transformer.translation import write_lines

            write_lines("-", lines)
        else:
            with self._writing():
                self.partial.append(lines, done)


@contextlib.contextmanager
def output_in_parts(
    command: str,
    output: str | os.PathLike[str],
    total: int,
    signature: str,
    made: str = "translations",
    *,
    unit: str = "line",
    source: str = "the input",
    writing: Writing = contextlib.nullcontext,
) -> Iterator[OutputParts]:
    """A long command's output saved as it is made: yields the `OutputParts`
    of the `total` input lines, which go on after the lines an earlier run
    of the same `signature` already answered (with a warning, as for a
    partial output of another signature that is dropped); the partial
    output becomes ``OUTPUT`` when the block ends, and a stopped block
    (`CommandInterrupted`) says which lines are kept and where.

    `made` names the output lines to the user, `unit` one input line and
    `source` the input (``"sentence"`` of ``"the test set"``); every write
    into the output's folder (the start, each part, the end) happens inside
    `writing()` (evaluate's lock of the run folder it writes into).
    """
    from keras_transformer.translation.lines import PartialOutput

    if str(output) == "-":
        yield OutputParts(None, 0, total)
        return
    partial = PartialOutput(output, signature, command=f"keras-transformer {command}")
    try:
        with writing():
            start, dropped = partial.start()
    except BaseException:
        partial.stop()
        raise
    if dropped:
        warn(
            command,
            f"{partial.lines_path} held the {made} of another command (another "
            f"input, settings or model), or was damaged: starting from the first "
            f"{unit}.",
        )
    elif start:
        warn(
            command,
            f"going on after {unit} {start} of {total}: the {made} before it are "
            f"in {partial.lines_path}, from an earlier run of this command.",
        )
    try:
        yield OutputParts(partial, start, total, writing)
    except BaseException as e:
        partial.stop()
        if isinstance(e, CommandInterrupted) and partial.done:
            e.kept = (
                f"after {unit} {partial.done} of {source}, whose {made} are in "
                f"{partial.lines_path}. Run the same command again to go on from "
                f"{unit} {partial.done + 1}."
            )
        raise
    try:
        with writing():
            partial.finish()
    except BaseException:
        partial.stop()
        raise


def command_signature(
    args: argparse.Namespace,
    lines: Sequence[str],
    add_arguments: Callable[[argparse.ArgumentParser], None],
    per_line: Sequence[Any],
    folders: Sequence[str],
    output: str | os.PathLike[str],
) -> str:
    """What a command's output lines are made of, as one digest (for
    `output_in_parts`): the input's `lines`, the command's settings (read
    through its parser, `add_arguments`; `per_line`: options with one value
    per line) and the files of the model `folders` (a run that trained on,
    or another export, differs), but for those of the `output` itself."""
    import hashlib
    import json

    digest = hashlib.sha256()
    for line in lines:
        digest.update(line.encode("utf-8", "surrogatepass") + b"\n")
    settings = {
        name: getattr(args, name, default)
        for name, default in sorted(parser_defaults(add_arguments).items())
        if name not in ("input", "source", "target", "output", "no_progress")
    }
    # The output's own files (an OUTPUT inside the run folder) are no part
    # of the model.
    own = os.path.abspath(output)
    models = [_folder_state(folder, ignore=own) for folder in folders]
    summary = json.dumps([settings, list(per_line), models], default=str)
    digest.update(summary.encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


def _folder_state(folder: str, ignore: str) -> list[tuple[str, int, int]]:
    """Name, size and time of the files in `folder` and its sub-folders (one
    level), but for lock files, those whose path starts with `ignore` and
    what other commands write into a run folder (``evaluate``'s hypotheses
    and TensorBoard scores): a new checkpoint or a re-export changes it."""
    from keras_transformer.runs.layout import LOG_DIR, TRANSLATIONS_DIR

    found = []
    for entry in sorted(os.scandir(folder), key=lambda entry: entry.name):
        if entry.name in (LOG_DIR, TRANSLATIONS_DIR) and entry.is_dir():
            continue
        entries = [entry]
        if entry.is_dir():
            entries = sorted(os.scandir(entry.path), key=lambda entry: entry.name)
        for file in entries:
            path = os.path.abspath(file.path)
            skip = file.name.endswith(".lock") or path.startswith(ignore)
            if file.is_file() and not skip:
                stat = file.stat()
                name = os.path.relpath(file.path, folder)
                found.append((name, stat.st_size, stat.st_mtime_ns))
    return found


__all__ = ["CHUNK_LINES", "OutputParts", "command_signature", "output_in_parts"]

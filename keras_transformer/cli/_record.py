"""`--record NAME`: a command's measured figures as a results record.

The figures a command prints (BLEU, chrF, accuracy, bits/dim, the number of
sentences or examples) are written with `results_records.write_record` as
``<records dir>/NAME.json`` (default ``docs/results``), together with the
command, the commit, the date and the machine: the record a page that
quotes them is checked against (docs/results.md, "Results records").
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

#: Arguments that say how the command runs, not what it measures.
_NOT_IN_COMMAND = {"handler", "command", "record", "records_dir", "json", "no_progress"}


def add_record_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds ``--record NAME`` and ``--records-dir`` to a command's parser."""
    parser.add_argument(
        "--record",
        metavar="NAME",
        help="Also write the scores as the results record <records dir>/NAME.json, "
        "with this command, the commit, the date and the machine "
        "(docs/results.md, 'Results records').",
    )
    parser.add_argument(
        "--records-dir",
        default="docs/results",
        help="Folder of the results records (default: docs/results).",
    )


def check_record_arguments(args: argparse.Namespace) -> None:
    """Refuses a bad ``--record`` name or ``--records-dir`` before any work.

    Checked at the command's start, so that a long evaluation is not lost
    to a name or folder that `write_result_record` would refuse at its end.
    Without ``--record``, ``--records-dir`` is not used and not checked.

    Raises:
        CommandError: naming the argument and what to pass instead.
    """
    if not getattr(args, "record", None):
        return
    from keras_transformer.cli._common import CommandError, check_path
    from keras_transformer.results_records import RECORD_NAME

    if not RECORD_NAME.fullmatch(args.record):
        raise CommandError(
            f"--record {args.record!r} is not a record name: pass letters, digits, "
            "'_' and '-' only (the record is <records dir>/NAME.json)."
        )
    records_dir = check_path(args.records_dir, "new output folder", "--records-dir")
    # `--record config --records-dir <run>` would replace the run's config.json.
    record_file = records_dir / f"{args.record}.json"
    check_path(record_file, "new file", "--records-dir/--record")


def command_line(args: argparse.Namespace) -> str:
    """The command that reproduces these arguments' measurement."""
    words = ["keras-transformer", args.command]
    for key, value in sorted(vars(args).items()):
        if key in _NOT_IN_COMMAND or value is None or value is False:
            continue
        option = "--" + key.replace("_", "-")
        words += [option] if value is True else [option, str(value)]
    return " ".join(words)


def write_result_record(
    args: argparse.Namespace, values: Mapping[str, Any], what: str
) -> Path | None:
    """Writes the numbers among `values` as the record ``args.record``, if asked.

    Args:
        args: the command's arguments (``record``, ``records_dir``, ...).
        values: the result's JSON-compatible values (its ``to_dict()``).
        what: one sentence saying what was measured.

    Returns:
        The record's path, or ``None`` without ``--record``.
    """
    if not getattr(args, "record", None):
        return None
    from keras_transformer.results_records import write_record

    figures = {
        key: value
        for key, value in values.items()
        if isinstance(value, int | float) and not isinstance(value, bool)
    }
    counts = [
        f"{value} {key.removeprefix('num_').replace('_', ' ')}"
        for key, value in figures.items()
        if key.startswith("num_")
    ]
    sample = ", ".join(counts) or "see the command"
    if values.get("split"):
        sample += f" of {values['split']}"
    path = write_record(
        args.records_dir,
        args.record,
        figures,
        command=command_line(args),
        sample=sample,
        timing="none",
        what=what,
    )
    print(f"Results record: {path}", file=sys.stderr)
    return path

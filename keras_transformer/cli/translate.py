"""``keras-transformer translate``: one translation per input line."""

from __future__ import annotations

import argparse

from keras_transformer.cli._common import (
    add_translator_arguments,
    check_translator_arguments,
    load_search_translator,
    translating,
)

NAME = "translate"
HELP = "Translate a file or standard input, one output line per input line."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``keras-transformer translate``."""
    add_translator_arguments(parser)
    parser.add_argument(
        "--input",
        default="-",
        help="File of sentences, one per line (default: standard input).",
    )
    parser.add_argument(
        "--output",
        default="-",
        help="Where to write the translations, one per line (default: standard "
        "output).",
    )
    parser.add_argument(
        "--no-progress",
        action="store_true",
        help="No progress bar (shown on standard error when --input is a file).",
    )


def run(args: argparse.Namespace) -> int:
    """Reads the lines, translates them with `Translator`, writes them."""
    check_translator_arguments(args, input="file", output="new file")
    from keras_transformer.translation import read_lines, write_lines

    lines = read_lines(args.input)
    translator = load_search_translator(args)
    progress = str(args.input) != "-" and not args.no_progress
    with translating(NAME, translator, "lines"):
        outputs = translator.translate(lines, progress=progress)
    write_lines(args.output, outputs)
    return 0

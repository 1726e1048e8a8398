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
    if _is_ctranslate2(args.workdir):
        return _translate_ctranslate2(args, lines)
    translator = load_search_translator(args)
    progress = str(args.input) != "-" and not args.no_progress
    with translating(NAME, translator, "lines"):
        outputs = translator.translate(lines, progress=progress)
    write_lines(args.output, outputs)
    return 0


def _is_ctranslate2(workdir: str) -> bool:
    from keras_transformer.ctranslate2 import is_ctranslate2_dir

    return is_ctranslate2_dir(workdir)


def _translate_ctranslate2(args: argparse.Namespace, lines: list[str]) -> int:
    """``--workdir`` names a CTranslate2 export: served by CTranslate2 with
    the folder's settings, or the beam size and alpha given."""
    from keras_transformer.ctranslate2 import CTranslate2Translator
    from keras_transformer.translation import write_lines

    if args.method not in ("beam", "greedy"):
        raise ValueError(
            f"A CTranslate2 export serves beam search or greedy decoding, not "
            f"--method {args.method}; pass --method beam or greedy."
        )
    translator = CTranslate2Translator(args.workdir)
    beam = 1 if args.method == "greedy" else args.beam_size
    outputs = translator.translate(
        lines, beam_size=beam, alpha=args.alpha, batch_size=args.batch_size
    )
    write_lines(args.output, outputs)
    return 0

"""``keras-transformer score``: the log-probability of given translations.

Forced decoding (`keras_transformer.translation.Translator.score`): for each
source/target pair, ``log P(target | source)`` under the model, summed and
per subword token (END last).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from keras_transformer.cli._common import (
    CommandError,
    add_model_arguments,
    check_run_kind,
    check_translator_arguments,
    report_cut_sources,
    translating,
    warn,
)
from keras_transformer.cli._parts import (
    add_line_by_line_arguments,
    command_signature,
    output_in_parts,
)
from keras_transformer.cli._typed import answer_typed_lines
from keras_transformer.validation import count_of

NAME = "score"
HELP = (
    "Score given translations (forced decoding): print 'log_prob<TAB>per-token "
    "log-probs' for each source/target pair."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``keras-transformer score``."""
    from keras_transformer.decoding.settings import default_setting

    add_model_arguments(parser)
    pairs = parser.add_argument_group(
        "pairs",
        "Either --source and --target files (line by line), or --input: lines "
        "'source<TAB>target' (default: standard input).",
    )
    pairs.add_argument("--source", help="File of source sentences, one per line.")
    pairs.add_argument("--target", help="File of their translations, line by line.")
    add_line_by_line_arguments(
        parser,
        input_file="'source<TAB>target' lines",
        item="pair",
        done="scored",
        output="one line per pair: log P(target | source), a tab, then the "
        "log-probability of each subword token, END last, separated by spaces",
        input_group=pairs,
    )
    parser.add_argument(
        "--max-input-length",
        type=int,
        default=default_setting("max_input_length"),
        help="Longest source in subword ids, END included; longer ones are cut "
        "(default %(default)s).",
    )
    parser.add_argument(
        "--batch-size", type=int, default=32, help="Pairs scored together."
    )


def read_pairs(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """The sources and targets of ``--source``/``--target`` or ``--input``."""
    from keras_transformer.translation import read_lines

    if (args.source is None) != (args.target is None):
        raise CommandError("Pass both --source and --target, or neither (--input).")
    if args.source is not None:
        sources, targets = read_lines(args.source), read_lines(args.target)
        if len(sources) != len(targets):
            raise CommandError(
                f"--source has {count_of(len(sources), 'line')} but --target has "
                f"{len(targets)}; pass one target per source."
            )
        return sources, targets
    sources, targets = [], []
    for number, line in enumerate(read_lines(args.input), start=1):
        if "\t" not in line:
            raise CommandError(
                f"--input line {number} has no tab: write 'source<TAB>target'."
            )
        source, target = line.split("\t", 1)
        sources.append(source)
        targets.append(target)
    return sources, targets


def _score_lines(scores: list[Any]) -> list[str]:
    """One output line per `TranslationScore`: the sum, a tab, the tokens'."""
    return [
        f"{s.log_prob:.4f}\t" + " ".join(f"{x:.4f}" for x in s.token_log_probs)
        for s in scores
    ]


def _score_typed(args: argparse.Namespace, translator: Any) -> None:
    """Scores each 'source<TAB>target' pair typed at the terminal as soon as
    it is entered (`answer_typed_lines`); a line without a tab is skipped
    with a warning (a file's ends the command)."""

    def score(number: int, line: str) -> list[str] | None:
        if "\t" not in line:
            warn(NAME, f"line {number} has no tab: type 'source<TAB>target'.")
            return None
        source, target = line.split("\t", 1)
        with translating(NAME, translator, "lines", first_number=number):
            return _score_lines(translator.score([source], [target]))

    prompt = "type 'source<TAB>target' and press Enter to score the pair"
    answer_typed_lines(NAME, prompt, args.output, score)


def run(args: argparse.Namespace) -> int:
    """Reads the pairs, scores them with `Translator.score`, writes the scores
    (pairs typed at a terminal: each as it is entered, `_score_typed`)."""
    check_translator_arguments(
        args, source="file", target="file", input="file", output="new file"
    )
    check_run_kind(args.workdir, "translation", "--workdir", NAME)
    from keras_transformer.translation import Translator

    typed = args.source is None and args.target is None and str(args.input) == "-"
    typed = typed and sys.stdin.isatty()
    sources, targets = ([], []) if typed else read_pairs(args)
    translator = Translator.load(
        args.workdir,
        args.weights,
        max_input_length=args.max_input_length,
        batch_size=args.batch_size,
    )
    if typed:
        _score_typed(args, translator)
        return 0
    _score_pairs(args, translator, sources, targets)
    return 0


def _score_pairs(
    args: argparse.Namespace, translator: Any, sources: list[str], targets: list[str]
) -> None:
    """Scores the pairs CHUNK_LINES at a time, in order, each part written as
    soon as it is done (`output_in_parts`): a stopped command keeps the
    scores of the parts before, in ``OUTPUT.partial``, and the same command
    run again goes on after them."""
    from keras_transformer.progress import LineProgress

    pairs = [f"{s}\t{t}" for s, t in zip(sources, targets, strict=True)]
    from_files = args.source is not None or str(args.input) != "-"
    signature = command_signature(
        args, pairs, add_arguments, [], [args.workdir], args.output
    )
    with output_in_parts(NAME, args.output, len(pairs), signature, "scores") as parts:
        bar = None
        if from_files and not args.no_progress:
            bar = LineProgress(len(pairs) - parts.start, "pairs")
        cut: list[int] = []
        for first, last in parts.ranges(args.batch_size):
            part = bar.part(first - parts.start) if bar else False
            with translating(NAME, translator, "lines", report=False):
                scores = translator.score(
                    sources[first:last], targets[first:last], progress=part
                )
            cut += [first + i for i in translator.cut_lines]
            parts.write(_score_lines(scores), last)
        report_cut_sources(NAME, translator, "lines", cut=cut)

"""``keras-transformer classify``: classify reviews with a classification run.

Each input line is one review; each output line its label (``positive``
where P(positive) > 0.5, else ``negative``), a tab and P(positive), read as
training read the reviews (`keras_transformer.export.ReviewClassifier`, the
function of the export's ``classify`` signature).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from keras_transformer.cli._common import (
    CommandError,
    add_model_arguments,
    check_run_kind,
    check_translator_arguments,
)
from keras_transformer.cli._parts import (
    add_line_by_line_arguments,
    command_signature,
    output_in_parts,
)
from keras_transformer.cli._typed import answer_typed_lines

NAME = "classify"
HELP = (
    "Classify reviews with a classification run or its export: print "
    "'label<TAB>P(positive)' for each input line."
)

#: What the numeric options accept (`check_numbers`).
_NUMBERS = {"--batch-size": (lambda v: v >= 1, "a positive number of reviews")}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``keras-transformer classify``."""
    add_model_arguments(parser)
    add_line_by_line_arguments(
        parser,
        input_file="reviews, one per line",
        item="review",
        done="classified",
        output="one line per review: positive or negative, a tab, then P(positive)",
    )
    parser.add_argument(
        "--batch-size", type=int, default=32, help="Reviews classified together."
    )


def _label_lines(classifier: Any, reviews: Sequence[str]) -> list[str]:
    """One output line per review: its label, a tab, P(positive); an empty
    (or blank) review gives an empty line, so that the files stay aligned."""
    given = [i for i, review in enumerate(reviews) if review.strip()]
    lines = [""] * len(reviews)
    positive = classifier.classify([reviews[i] for i in given])
    for i, p in zip(given, positive, strict=True):
        lines[i] = f"{'positive' if p > 0.5 else 'negative'}\t{p:.4f}"
    return lines


def _classify_typed(args: argparse.Namespace, classifier: Any) -> None:
    """Classifies each review typed at the terminal as soon as it is entered
    (`answer_typed_lines`)."""
    answer_typed_lines(
        NAME,
        "type a review and press Enter",
        args.output,
        lambda _, review: _label_lines(classifier, [review]),
    )


def _classify_file(
    args: argparse.Namespace, classifier: Any, reviews: list[str]
) -> None:
    """Classifies the reviews CHUNK_LINES at a time, in order, each part
    written as soon as it is done (`output_in_parts`): a stopped command
    keeps the lines of the parts before, in ``OUTPUT.partial``, and the same
    command run again goes on after them."""
    from keras_transformer.progress import LineProgress

    signature = command_signature(
        args, reviews, add_arguments, [], [args.workdir], args.output
    )
    with output_in_parts(
        NAME, args.output, len(reviews), signature, "labels", unit="review"
    ) as parts:
        bar = None
        if str(args.input) != "-" and not args.no_progress:
            bar = LineProgress(len(reviews) - parts.start, "reviews", stream=sys.stderr)
        for first, last in parts.ranges(args.batch_size):
            parts.write(_label_lines(classifier, reviews[first:last]), last)
            if bar is not None:  # the last call reports the total
                bar.update(last - parts.start)


def run(args: argparse.Namespace) -> int:
    """Reads the reviews, classifies them, writes one line for each."""
    check_translator_arguments(args, numbers=_NUMBERS, input="file", output="new file")
    check_run_kind(args.workdir, "classification", "--workdir", NAME)
    from keras_transformer.export.classification import ReviewClassifier
    from keras_transformer.translation import read_lines

    typed = str(args.input) == "-" and sys.stdin.isatty()
    reviews = [] if typed else read_lines(args.input)
    try:
        classifier = ReviewClassifier.load(
            args.workdir, args.weights or "last", batch_size=args.batch_size
        )
    except ValueError as e:
        raise CommandError(str(e)) from e
    if typed:
        _classify_typed(args, classifier)
    else:
        _classify_file(args, classifier, reviews)
    return 0

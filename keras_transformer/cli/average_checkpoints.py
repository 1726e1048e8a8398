"""``keras-transformer average-checkpoints``: one model from the last N (§6.1)."""

from __future__ import annotations

import argparse

from keras_transformer.cli._common import (
    CommandError,
    add_weights_without_fingerprint_argument,
    check_numbers,
    check_path,
    check_paths,
    refuse_export,
)

NAME = "average-checkpoints"
HELP = "Average the weights of the last N checkpoints into one model (§6.1)."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``keras-transformer average-checkpoints``."""
    parser.add_argument("--workdir", required=True, help="The run folder.")
    parser.add_argument(
        "--last",
        type=int,
        default=5,
        help="How many of the newest checkpoints to average (§6.1: 5 for the "
        "base model, 20 for the big one).",
    )
    parser.add_argument(
        "--output",
        help="The .weights.h5 file to write (default <workdir>/averaged.weights.h5); "
        "never one of the run's own files (best.weights.h5, config.json, ...).",
    )
    add_weights_without_fingerprint_argument(parser)


def run(args: argparse.Namespace) -> int:
    """Writes the averaged weights and says where."""
    check_numbers(args, {"--last": (lambda v: v >= 1, "1 or more checkpoints")})
    check_paths(args, workdir="folder")
    if args.output is not None:
        # A file that can be written; where it may go is the average's own
        # rule (`average_output_file`: its default file in the run folder is
        # taken, other files of a run refused), not other commands' outputs'.
        check_path(args.output, "new file", "--output", placement=False)
    refuse_export(args.workdir, "--workdir", "checkpoints to average")
    from keras_transformer.training import average_checkpoints

    try:
        path = average_checkpoints(args.workdir, last=args.last, output=args.output)
    except (ValueError, FileNotFoundError) as e:
        raise CommandError(str(e)) from e
    print(f"Averaged weights written to {path}")
    return 0

"""Arguments shared by several commands, and the error the CLI prints.

Pure Python: the parser is built without importing TensorFlow or Keras.
"""

from __future__ import annotations

import argparse

from keras_transformer.conventions import DEFAULT_MAX_INPUT_LENGTH, EXTRA_LENGTH

__all__ = ["CommandError", "add_model_arguments", "add_search_arguments"]


class CommandError(Exception):
    """A user error: printed without a traceback, exit status 2."""


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """``--workdir`` and ``--weights``: which trained model to load."""
    parser.add_argument(
        "--workdir",
        required=True,
        help="A training run folder (keras-transformer train --workdir), or a "
        "folder written by keras-transformer export.",
    )
    parser.add_argument(
        "--weights",
        default="last",
        help="Which weights of a training run: last, best, average, or the path "
        "of a checkpoint or .weights.h5 file (default: last).",
    )


def add_search_arguments(
    parser: argparse.ArgumentParser,
    *,
    max_input_length: int | None = DEFAULT_MAX_INPUT_LENGTH,
    max_input_length_help: str = f"(default {DEFAULT_MAX_INPUT_LENGTH})",
    batch_size: bool = True,
) -> None:
    """The beam search options of §6.1 shared by evaluate, translate, export."""
    parser.add_argument(
        "--beam-size", type=int, default=4, help="Beam size (§6.1: 4); 1: greedy."
    )
    parser.add_argument(
        "--length-penalty",
        type=float,
        default=0.6,
        help="Length penalty alpha (§6.1: 0.6).",
    )
    parser.add_argument(
        "--max-input-length",
        type=int,
        default=max_input_length,
        help="Longest source in subword ids, END included; longer ones are cut "
        + max_input_length_help
        + ".",
    )
    parser.add_argument(
        "--extra-length",
        type=int,
        default=EXTRA_LENGTH,
        help="An output may be this many tokens longer than its source (§6.1: 50).",
    )
    if batch_size:
        parser.add_argument(
            "--batch-size", type=int, default=32, help="Sentences decoded together."
        )

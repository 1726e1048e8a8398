"""``keras-transformer complete``: complete an image run's test images (PNG grid).

The Image Transformer's output (Parmar et al., 2018, §4 and Figure 1): the
top rows of held-out images are given, the rest drawn from the model in its
generation order; `keras_transformer.training.image_recipe.complete_run_images`.
"""

from __future__ import annotations

import argparse

from keras_transformer.cli._common import (
    IMAGE_NUMBERS,
    CommandError,
    add_weights_without_fingerprint_argument,
    check_numbers,
    check_paths,
    check_run_kind,
    in_flag_words,
    refuse_export,
)
from keras_transformer.validation import count_of

NAME = "complete"
HELP = "Complete the test images of an image run from their top rows (PNG grid)."


#: (flag, type, default, help) of the drawing options.
_OPTIONS = (
    ("--weights", str, "last", "last, best, average, or a weights file."),
    ("--images", int, 4, "Test images (the grid's rows)."),
    ("--samples", int, 3, "Completions per image."),
    ("--given-rows", int, None, "Rows given (default: half, whole query blocks)."),
    ("--temperature", float, 1.0, "1 samples the model; 0 the most likely values."),
    ("--seed", int, 0, "Seed of the draws."),
)


#: What the drawing options accept (`check_numbers`).
_NUMBERS = {
    "--images": (lambda v: v >= 1, "a positive number of test images"),
    "--samples": (lambda v: v >= 1, "a positive number of completions per image"),
    **IMAGE_NUMBERS,
    "--seed": (lambda v: v >= 0, "a seed of 0 or more"),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``keras-transformer complete``."""
    parser.add_argument("--workdir", required=True, help="The image run's folder.")
    parser.add_argument(
        "--output",
        required=True,
        help="The image file to write: .png (other endings that Pillow writes, "
        "such as .webp, work too).",
    )
    for flag, kind, default, text in _OPTIONS:
        parser.add_argument(flag, type=kind, default=default, help=text)
    add_weights_without_fingerprint_argument(parser)


def run(args: argparse.Namespace) -> int:
    """Writes the grid and says where."""
    check_paths(args, workdir="folder", output="new file")
    check_numbers(args, _NUMBERS)
    refuse_export(
        args.workdir,
        "--workdir",
        "test images (an image export completes images through its `complete` "
        "signature)",
    )
    check_run_kind(args.workdir, "image", "--workdir", NAME)
    from keras_transformer.training.image_recipe import complete_run_images

    names = ("weights", "samples", "given_rows", "temperature", "seed")
    options = {name: getattr(args, name) for name in names}
    try:
        path = complete_run_images(
            args.workdir, args.output, num_images=args.images, **options
        )
    except (ValueError, FileNotFoundError) as e:
        message = in_flag_words(str(e), *names, num_images="--images")
        raise CommandError(message) from e
    images = count_of(args.images, "test image")
    samples = count_of(args.samples, "completion")
    print(
        f"Completions of {images} written to {path} (rows: given, {samples}, original)."
    )
    return 0

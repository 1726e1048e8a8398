"""``keras-transformer complete``: complete an image run's test images (PNG grid).

The Image Transformer's output (Parmar et al., 2018, §4 and Figure 1): the
top rows of held-out images are given, the rest drawn from the model in its
generation order; `keras_transformer.training.image_recipe.complete_run_images`.
"""

from __future__ import annotations

import argparse

from keras_transformer.cli._common import CommandError, check_paths

NAME = "complete"
HELP = "Complete the test images of an image run from their top rows (PNG grid)."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``keras-transformer complete``."""
    parser.add_argument("--workdir", required=True, help="The image run's folder.")
    parser.add_argument("--output", required=True, help="The PNG file to write.")
    parser.add_argument(
        "--weights",
        default="last",
        help="last, best, average, or a .weights.h5 file / checkpoint prefix.",
    )
    parser.add_argument("--images", type=int, default=4, help="Test images (rows).")
    parser.add_argument(
        "--samples", type=int, default=3, help="Completions per image (columns)."
    )
    parser.add_argument(
        "--given-rows",
        type=int,
        help="Rows given (default: half the image, whole query blocks).",
    )
    parser.add_argument(
        "--temperature",
        type=float,
        default=1.0,
        help="1 samples the model; 0 takes the most likely values.",
    )
    parser.add_argument("--seed", type=int, default=0, help="Seed of the draws.")


def run(args: argparse.Namespace) -> int:
    """Writes the grid and says where."""
    check_paths(args, workdir="folder", output="new file")
    from keras_transformer.training.image_recipe import complete_run_images

    try:
        path = complete_run_images(
            args.workdir,
            args.output,
            weights=args.weights,
            num_images=args.images,
            samples=args.samples,
            given_rows=args.given_rows,
            temperature=args.temperature,
            seed=args.seed,
        )
    except (ValueError, FileNotFoundError) as e:
        raise CommandError(str(e)) from e
    print(
        f"Completions of {args.images} test images written to {path} (rows: given, "
        f"{args.samples} completions, original)."
    )
    return 0

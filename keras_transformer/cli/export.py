"""``keras-transformer export``: a run in one of the registered formats.

The SavedModel (the default) of a translation run translates raw strings, a
classification run's classifies raw reviews, an image run's completes
images from their top rows; ``--format`` picks another format of the
registry (`keras_transformer.export.formats`), which this command
dispatches through.
"""

from __future__ import annotations

import argparse

from keras_transformer.cli._common import (
    IMAGE_NUMBERS,
    SEARCH_NUMBERS,
    CommandError,
    add_translator_arguments,
    check_translator_arguments,
    in_flag_words,
    search_settings,
)
from keras_transformer.export.formats import DEFAULT_FORMAT, FORMATS

NAME = "export"
HELP = "Write a SavedModel: translation, classification or image completion."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``keras-transformer export``."""
    add_translator_arguments(
        parser,
        max_input_length_help="(default {default}, or the model's learned positions)",
        batch_size=False,
    )
    parser.add_argument(
        "--output",
        required=True,
        help="The export folder, e.g. exported/de_en/1 (TensorFlow Serving wants "
        "a numbered version folder).",
    )
    parser.add_argument(
        "--given-rows",
        type=int,
        default=None,
        help="Image runs: the rows given to the SavedModel (default: half, whole "
        "query blocks); --temperature is then the sampling temperature.",
    )
    parser.add_argument(
        "--format",
        default=DEFAULT_FORMAT,
        help=f"One of {', '.join(FORMATS)}. savedmodel (default): strings in, "
        "translations out; litert: a "
        "translation run's greedy decoding as model.tflite (ids in, ids out) "
        "with tokenizer.model beside it (greedy: of the search flags only "
        "--max-input-length and --extra-length apply; docs/export.md, "
        "'LiteRT, on-device'); ctranslate2: a CTranslate2 model folder of a "
        "translation run, served by keras-transformer translate --workdir FOLDER.",
    )
    parser.add_argument(
        "--quantization",
        default=None,
        help="The SavedModel of a translation run: float32 (default) or int8 "
        "(its feed-forward weights in int8, computed in float32; Keras' "
        "Model.quantize); "
        "--format litert: int8 dynamic-range weights (default) or float32; "
        "--format ctranslate2: the weight type (float32, the default, int8, "
        "int16, float16, ...; see ctranslate2.get_supported_compute_types('cpu')).",
    )
    parser.add_argument(
        "--jit-compile",
        action="store_true",
        help="Translation runs: a call with 1 to 4 sentences runs its search "
        "compiled with XLA (same translations, lower latency; TensorFlow Serving "
        "then needs --xla_cpu_compilation_enabled=true).",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="Replace an earlier export of the same --format in --output (it stays "
        "whole until the new one is complete; a run folder, another format's "
        "export or any other folder is refused, never deleted).",
    )


#: The search's number rules, and an image run's (`IMAGE_NUMBERS`): its
#: --temperature may be 0 (a translation's search refuses that itself).
_NUMBERS = {**SEARCH_NUMBERS, **IMAGE_NUMBERS}


def _settings(args: argparse.Namespace) -> dict:
    """The settings of the command line: the search flags given another
    value than their default (the format and kind refuse those they do not
    take), ``--given-rows`` and ``--jit-compile`` when given."""
    settings = search_settings(args)
    if args.given_rows is not None:
        settings["given_rows"] = args.given_rows
    if args.jit_compile:
        settings["jit_compile"] = True
    return settings


def run(args: argparse.Namespace) -> int:
    """Loads the model, writes the export of its kind in the format asked for,
    says how to use it."""
    from keras_transformer.export import formats
    from keras_transformer.files import FolderLockedError
    from keras_transformer.runs import run_kind

    try:
        export_format = formats.get_format(args.format)
    except ValueError as e:
        raise CommandError(f"--format: {e}") from e
    check_translator_arguments(
        args, output="new run or export folder", numbers=_NUMBERS
    )
    try:
        path = formats.export_run_as(
            args.format,
            args.workdir,
            args.output,
            args.weights,
            quantization=args.quantization,
            overwrite=args.overwrite,
            **_settings(args),
        )
    except (FileExistsError, FolderLockedError) as e:
        # One line (a FileWriteError, a full disk, is an OSError: one line too).
        raise ValueError(str(e)) from e
    except ValueError as e:
        # The image settings' checks speak of the Python arguments.
        raise ValueError(in_flag_words(str(e), "given_rows")) from e
    quantization = args.quantization or next(iter(export_format.quantizations), None)
    print(export_format.summary(path, run_kind(args.workdir), quantization))
    return 0

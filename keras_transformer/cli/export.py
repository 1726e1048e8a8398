"""``keras-transformer export``: the SavedModel of a run, for its kind.

A translation run's translates raw strings, a classification run's
classifies raw reviews, an image run's completes images from their top rows
(`keras_transformer.export.export_run` dispatches on the run's kind).
"""

from __future__ import annotations

import argparse

from keras_transformer.cli._common import (
    add_translator_arguments,
    check_translator_arguments,
    search_settings,
)

NAME = "export"
HELP = "Write a SavedModel: translation, classification or image completion."

#: What each kind's SavedModel offers, for the closing line.
_SIGNATURES = {
    "translation": "serving_default and translate (strings -> translations, "
    "scores), translate_ids (strings -> token_ids, lengths, scores)",
    "classification": "serving_default and classify (texts -> probabilities, labels)",
    "image": "serving_default and complete (top_rows, seed -> images)",
}


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
        choices=("savedmodel", "ctranslate2"),
        default="savedmodel",
        help="savedmodel (default), or ctranslate2: a CTranslate2 model folder of a "
        "translation run, served by keras-transformer translate --workdir FOLDER.",
    )
    parser.add_argument(
        "--quantization",
        default="float32",
        help="With --format ctranslate2: the weight type (float32, int8, int16, "
        "float16, ...; see ctranslate2.get_supported_compute_types('cpu')).",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="Replace an earlier export in --output (it stays whole until the new "
        "one is complete; a folder that holds no export is never deleted).",
    )


def _kind_settings(args: argparse.Namespace, kind: str) -> dict:
    """The settings of the command line for an export of `kind`: every
    search flag for translation; for the other kinds, only the flags given
    another value than their default (`export_run` refuses those it does
    not take)."""
    settings = search_settings(args)
    if kind != "translation":
        from keras_transformer.decoding.settings import default_setting

        settings = {k: v for k, v in settings.items() if v != default_setting(k)}
    if args.given_rows is not None:
        settings["given_rows"] = args.given_rows
    return settings


def run(args: argparse.Namespace) -> int:
    """Loads the model, writes the SavedModel of its kind, says how to inspect it."""
    check_translator_arguments(args, output="new folder")
    from keras_transformer import export
    from keras_transformer.files import FolderLockedError

    if args.format == "ctranslate2":
        return _export_ctranslate2(args)
    if args.quantization != "float32":
        raise ValueError(
            f"--quantization {args.quantization} applies to --format ctranslate2 "
            "only; add --format ctranslate2 or leave --quantization out."
        )
    kind = export.run_kind(args.workdir)
    try:
        path = export.export_run(
            args.workdir,
            args.output,
            args.weights,
            overwrite=args.overwrite,
            **_kind_settings(args, kind),
        )
    except (FileExistsError, FolderLockedError) as e:
        # One line (a FileWriteError, a full disk, is an OSError: one line too).
        raise ValueError(str(e)) from e
    print(
        f"Exported the {kind} run to {path}: signatures {_SIGNATURES[kind]}; Keras "
        f"model in {path / export.MODEL_FILE}. Inspect it with: "
        f"saved_model_cli show --dir {path} --all"
    )
    return 0


def _export_ctranslate2(args: argparse.Namespace) -> int:
    """``--format ctranslate2``: the CTranslate2 folder of a translation run."""
    from keras_transformer.ctranslate2 import export_run_ctranslate2
    from keras_transformer.files import FolderLockedError

    try:
        path = export_run_ctranslate2(
            args.workdir,
            args.output,
            args.weights,
            quantization=args.quantization,
            overwrite=args.overwrite,
            **search_settings(args),
        )
    except (FileExistsError, FolderLockedError) as e:
        raise ValueError(str(e)) from e
    print(
        f"Exported the translation run to {path} for CTranslate2 "
        f"({args.quantization} weights). Translate with: keras-transformer "
        f"translate --workdir {path}"
    )
    return 0

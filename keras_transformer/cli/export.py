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
    "scores), translate_ids (strings -> token_ids, lengths, scores), n_best, "
    "score, translate_with_prefix, translate_constrained",
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
        choices=("savedmodel", "litert", "ctranslate2"),
        default="savedmodel",
        help="savedmodel (default): strings in, translations out; litert: a "
        "translation run's greedy decoding as model.tflite (ids in, ids out) "
        "with tokenizer.model beside it (greedy: of the search flags only "
        "--max-input-length and --extra-length apply; docs/export.md, "
        "'LiteRT, on-device'); ctranslate2: a CTranslate2 model folder of a "
        "translation run, served by keras-transformer translate --workdir FOLDER.",
    )
    parser.add_argument(
        "--quantization",
        default=None,
        help="--format litert: int8 dynamic-range weights (default) or float32; "
        "--format ctranslate2: the weight type (float32, the default, int8, "
        "int16, float16, ...; see ctranslate2.get_supported_compute_types('cpu')).",
    )
    parser.add_argument(
        "--jit-compile",
        action="store_true",
        help="Translation runs: a call with one sentence runs its search "
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
    if args.jit_compile:
        settings["jit_compile"] = True
    return settings


def _run_litert(args: argparse.Namespace) -> int:
    """``--format litert``: the LiteRT split of a translation run."""
    from keras_transformer import export, litert

    if args.quantization not in (None, "int8", "float32"):
        raise ValueError(
            f"--format litert takes --quantization int8 or float32, not "
            f"{args.quantization}."
        )
    kind = export.run_kind(args.workdir)
    if kind != "translation":
        raise ValueError(
            f"--format litert exports translation runs; {args.workdir} is a {kind} "
            "run. Leave out --format for its SavedModel."
        )
    # Greedy search: of the search flags only the two lengths apply.
    settings = search_settings(args)
    lengths = {k: settings.get(k) for k in ("max_input_length", "extra_length")}
    path = litert.export_litert_run(
        args.workdir,
        args.output,
        args.weights,
        quantization=args.quantization or "int8",
        overwrite=args.overwrite,
        **{k: v for k, v in lengths.items() if v is not None},
    )
    print(
        f"Exported {path / litert.MODEL_FILE} (greedy, source ids -> token ids, "
        f"{args.quantization or 'int8'} weights) and {litert.TOKENIZER_FILE}; run "
        "it with keras_transformer.litert.LiteRTTranslator."
    )
    return 0


def run(args: argparse.Namespace) -> int:
    """Loads the model, writes the SavedModel of its kind, says how to inspect it."""
    check_translator_arguments(args, output="new folder")
    if args.jit_compile and args.format != "savedmodel":
        raise ValueError(
            f"--jit-compile applies to the SavedModel; --format {args.format} "
            "has its own runtime. Leave --jit-compile out."
        )
    if args.format == "litert":
        return _run_litert(args)
    if args.format == "ctranslate2":
        return _export_ctranslate2(args)
    if args.quantization is not None:
        raise ValueError(
            f"--quantization {args.quantization} applies to --format litert or "
            "ctranslate2; add one of them or leave --quantization out."
        )
    from keras_transformer import export
    from keras_transformer.files import FolderLockedError

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
            quantization=args.quantization or "float32",
            overwrite=args.overwrite,
            **search_settings(args),
        )
    except (FileExistsError, FolderLockedError) as e:
        raise ValueError(str(e)) from e
    print(
        f"Exported the translation run to {path} for CTranslate2 "
        f"({args.quantization or 'float32'} weights). Translate with: "
        "keras-transformer "
        f"translate --workdir {path}"
    )
    return 0

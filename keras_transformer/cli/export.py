"""``keras-transformer export``: a SavedModel that translates raw strings."""

from __future__ import annotations

import argparse

from keras_transformer.cli._common import (
    add_translator_arguments,
    check_translator_arguments,
    search_settings,
)

NAME = "export"
HELP = "Write a SavedModel that translates raw strings (tokenizer, beam search inside)."


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
        "--overwrite",
        action="store_true",
        help="Replace an earlier export in --output (it stays whole until the new "
        "one is complete; a folder that holds no export is never deleted).",
    )


def run(args: argparse.Namespace) -> int:
    """Loads the model, writes the SavedModel, says how to inspect it."""
    check_translator_arguments(args, output="new folder")
    from keras_transformer import export
    from keras_transformer.files import FolderLockedError
    from keras_transformer.translation import load_translator

    model, tokenizer = load_translator(args.workdir, args.weights)
    try:
        path = export.export_translator(
            model,
            tokenizer,
            args.output,
            **search_settings(args),
            overwrite=args.overwrite,
        )
    except (FileExistsError, FolderLockedError) as e:
        # One line (a FileWriteError, a full disk, is an OSError: one line too).
        raise ValueError(str(e)) from e
    print(
        f"Exported to {path}: signatures serving_default and "
        f"{export.TRANSLATE_SIGNATURE} (strings -> translations, scores), "
        f"{export.IDS_SIGNATURE} (strings -> token_ids, lengths, scores); Keras "
        f"model and tokenizer in {path / export.MODEL_FILE} and "
        f"{path / export.TOKENIZER_DIR}. Inspect it with: "
        f"saved_model_cli show --dir {path} --all"
    )
    return 0

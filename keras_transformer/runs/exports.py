"""An export folder (``keras-transformer export``): telling one, reading it.

`run_kind` tells the kind of run a run folder or an export folder holds.

The folder holds a SavedModel plus ``model.keras``, ``tokenizer/`` and
``export.json``; `load_export` reads back the Keras model, the tokenizer
and the settings.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import keras

from keras_transformer.data.tokenizer import SubwordTokenizer
from keras_transformer.files import TEMPORARY_PREFIX
from keras_transformer.runs.folder import RunFolder, is_run_dir
from keras_transformer.runs.layout import (
    EXPORT_INFO_FILE,
    EXPORT_MODEL_FILE,
    TOKENIZER_DIR,
)

__all__ = ["is_export_dir", "load_export", "run_kind"]


def is_export_dir(path: str | os.PathLike[str]) -> bool:
    """Whether `path` holds ``model.keras`` and ``tokenizer/`` (an export).

    Never the hidden temporary folder of an unfinished (or killed) export,
    ``.tmp-<pid>-<name>``, even when it already holds both.
    """
    path = Path(path)
    if path.name.startswith(TEMPORARY_PREFIX):
        return False
    return (path / EXPORT_MODEL_FILE).is_file() and (path / TOKENIZER_DIR).is_dir()


def load_export(
    export_dir: str | os.PathLike[str],
) -> tuple[keras.Model, SubwordTokenizer, dict[str, Any]]:
    """Reads the Keras model and tokenizer saved next to an exported SavedModel.

    For serving, load the SavedModel itself with ``tf.saved_model.load``;
    this is for evaluating or training the exported model further.

    Returns:
        ``(model, tokenizer, settings)``; `settings` is the content of
        ``export.json`` (empty when the folder has none).
    """
    export_dir = Path(export_dir)
    if not is_export_dir(export_dir):
        raise FileNotFoundError(
            f"{export_dir} holds no {EXPORT_MODEL_FILE} and {TOKENIZER_DIR}/: it is "
            "not a folder written by export_translator (keras-transformer export)."
        )
    model = keras.saving.load_model(export_dir / EXPORT_MODEL_FILE, compile=False)
    tokenizer = SubwordTokenizer.load(export_dir / TOKENIZER_DIR)
    info_path = export_dir / EXPORT_INFO_FILE
    info = (
        json.loads(info_path.read_text(encoding="utf-8")) if info_path.is_file() else {}
    )
    if "max_output_extra" in info:
        # Exports written before the §6.1 allowance had one name.
        info.setdefault("extra_length", info.pop("max_output_extra"))
    if "length_penalty" in info:  # exports written before alpha had one name
        info.setdefault("alpha", info.pop("length_penalty"))
    return model, tokenizer, info


def run_kind(path: str | os.PathLike[str]) -> str:
    """The kind of a run folder (its ``config.json``) or of an export folder
    (its ``export.json``); translation when neither says."""
    if is_run_dir(path):
        return RunFolder(path).kind()
    info = Path(path) / EXPORT_INFO_FILE
    if is_export_dir(path) and info.is_file():
        return str(
            json.loads(info.read_text(encoding="utf-8")).get("kind", "translation")
        )
    return "translation"

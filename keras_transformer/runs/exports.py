"""An export folder (``keras-transformer export``): telling one, reading it.

`run_kind` tells the kind of run a run folder or an export folder holds.

The folder holds a SavedModel plus ``model.keras``, ``tokenizer/`` and
``export.json``; `load_export` reads back the Keras model, the tokenizer
and the settings (whose ``quantization`` says how `quantized` the SavedModel
serves it).
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

import keras

from keras_transformer.data.tokenizer import SubwordTokenizer
from keras_transformer.files import (
    TEMPORARY_PREFIX,
    check_export_files,
    check_export_tokenizer,
    file_problem,
    read_json_object,
    short_error,
)
from keras_transformer.runs.folder import RunFolder, is_run_dir
from keras_transformer.runs.layout import (
    EXPORT_INFO_FILE,
    EXPORT_MODEL_FILE,
    TOKENIZER_DIR,
)
from keras_transformer.validation import check_path

__all__ = [
    "QUANTIZATIONS",
    "check_export_weights",
    "embedding_vocabulary",
    "is_export_dir",
    "load_export",
    "load_export_model",
    "quantized",
    "run_kind",
]

#: The weight types of a SavedModel export, the default first.
QUANTIZATIONS = ("float32", "int8")


def quantized(model: keras.Model, quantization: str = "float32") -> keras.Model:
    """`model`, or for ``"int8"`` a copy whose Dense layers hold int8 weights.

    Keras' ``Model.quantize`` gives each Dense layer (the position-wise
    feed-forward networks of §3.3, two thirds of a block's weights) int8
    weights with one scale per output unit (its absolute maximum); their
    inputs are not quantized, so each product runs in float32 on the
    dequantized weights (weight-only int8: a quarter of those weights' bytes,
    float32 speed; quantizing the inputs too was 2.5 times slower at batch
    64, `docs/export.md`). Attention projections, embeddings and the tied
    output projection (§3.4) stay float32. `model` itself is not changed.

    Raises:
        ValueError: (one line) for another quantization.
    """
    if quantization not in QUANTIZATIONS:
        raise ValueError(
            f"quantization={quantization!r} is not a SavedModel weight type; "
            f"use one of {', '.join(QUANTIZATIONS)}."
        )
    if quantization == "float32":
        return model
    copy = keras.models.clone_model(model)
    copy.set_weights(model.get_weights())
    with warnings.catch_warnings():
        # Keras names every layer without int8 kernels; those stay float32.
        warnings.filterwarnings("ignore", "Layer .* does not have a `quantize`")
        copy.quantize(
            quantization,
            config=keras.quantizers.Int8QuantizationConfig(activation_quantizer=None),
        )
    return copy


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
        ``export.json`` (empty when the folder has none). The model is the
        float32 one; an int8 export serves ``quantized(model, "int8")``.
    """
    check_path("`export_dir`", export_dir)
    export_dir = Path(export_dir)
    if not is_export_dir(export_dir):
        raise FileNotFoundError(
            f"{export_dir} holds no {EXPORT_MODEL_FILE} and {TOKENIZER_DIR}/: it is "
            "not a folder written by export_translator (keras-transformer export)."
        )
    model = load_export_model(export_dir / EXPORT_MODEL_FILE)
    tokenizer = SubwordTokenizer.load(export_dir / TOKENIZER_DIR)
    info = read_export_info(export_dir)
    info_file = export_dir / EXPORT_INFO_FILE
    check_export_tokenizer(tokenizer.fingerprint, info, info_file, "savedmodel")
    ids = embedding_vocabulary(model)
    if ids is not None and ids != tokenizer.vocabulary_size:
        raise ValueError(
            f"{export_dir / EXPORT_MODEL_FILE} embeds {ids} token ids but the "
            f"export's tokenizer has {tokenizer.vocabulary_size} pieces: the "
            "files come from different exports. Restore the export from a "
            "copy, or export its run again."
        )
    check_export_files(export_dir, info, info_file, "savedmodel")
    return model, tokenizer, info


def embedding_vocabulary(model: keras.Model) -> int | None:
    """The number of ids of a model's token embedding (its first layer with
    an integer ``vocabulary_size``; None: it has none)."""
    for layer in model.layers:
        if isinstance(getattr(layer, "vocabulary_size", None), int):
            return layer.vocabulary_size
    return None


def load_export_model(path: str | os.PathLike[str]) -> keras.Model:
    """The Keras model of an export (its ``model.keras``, uncompiled).

    Raises:
        ValueError: one line naming the file when it is missing, empty, cut
            short or otherwise unreadable (Keras said "File not found" of a
            damaged file), with the way back.
    """
    import zipfile

    path = Path(path)
    try:
        return keras.saving.load_model(path, compile=False)
    except Exception as e:  # noqa: BLE001 - Keras raises ValueError, zip errors...
        problem = file_problem(path)
        if problem is None:
            problem = (
                f"{path} is not a .keras zip file (cut short or damaged)"
                if not zipfile.is_zipfile(path)
                else f"{path} cannot be read as a Keras model ({short_error(e)})"
            )
        raise ValueError(
            f"{problem}: restore the export from a copy, or export its run again."
        ) from e


def read_export_info(export_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """The content of an export folder's ``export.json`` (empty when it has
    none); a damaged file, or one that holds the setting names of before
    0.1.0, is one line naming it."""
    info_path = Path(export_dir) / EXPORT_INFO_FILE
    if not info_path.is_file():
        return {}
    info = read_json_object(info_path, "export the run again to rewrite it.")
    # The names of two settings before 0.1.0: refused, not silently dropped.
    stale = sorted({"max_output_extra", "length_penalty"} & info.keys())
    if stale:
        raise ValueError(
            f"{info_path} holds {stale}, settings of an export written before "
            "0.1.0; export the run again to rewrite it."
        )
    return info


def run_kind(path: str | os.PathLike[str]) -> str:
    """The kind of a run folder (its ``config.json``) or of an export folder
    (its ``export.json``, read by `read_export_info`: a damaged one is one
    line naming it; an image export holds no ``tokenizer/``); translation
    when neither says."""
    if is_run_dir(path):
        return RunFolder(path).kind()
    return str(read_export_info(path).get("kind", "translation"))


def check_export_weights(export_dir: str | os.PathLike[str], weights: str) -> None:
    """Refuses, in one line, `weights` other than ``"last"`` for an export
    folder: it holds the weights it was exported with."""
    if weights != "last":
        raise ValueError(
            f"weights={weights!r} picks the weights of a training run, but "
            f"{export_dir} is an export, which holds the weights it was exported "
            "with: leave weights out, or export the run again with them."
        )

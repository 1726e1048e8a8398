"""A translation model and its tokenizer from a training run or an export."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Collection
from pathlib import Path
from typing import Any

import keras

from keras_transformer.data.tokenizer import SubwordTokenizer
from keras_transformer.decoding.settings import DecodeSettings
from keras_transformer.runs import (
    EXPORT_INFO_FILE,
    RunFolder,
    is_export_dir,
    is_run_dir,
    load_export,
    run_kind,
)
from keras_transformer.runs.exports import (
    check_export_weights,
    quantized,
    read_export_info,
)


def load_translator(
    path: str | os.PathLike[str], weights: str = "last", *, as_served: bool = True
) -> tuple[keras.Model, SubwordTokenizer]:
    """The model and tokenizer of a training run or of an export folder.

    Args:
        path: a ``keras-transformer train`` work directory (read with
            `keras_transformer.runs.RunFolder`), or a folder written by
            ``keras-transformer export`` (its ``model.keras`` and
            ``tokenizer/``, read with `keras_transformer.runs.load_export`).
        weights: for a training run: ``"last"``, ``"best"``, ``"average"`` or
            the path of a checkpoint or ``.weights.h5`` file; an export
            holds its weights, so only the default is taken for one.
        as_served: for an int8 export, its model as the SavedModel serves it
            (`keras_transformer.runs.exports.quantized`); False: float32, to
            export again.
    """
    path = Path(path)
    if is_export_dir(path):
        _check_translation(path)
        check_export_weights(path, weights)
        model, tokenizer, info = load_export(path)
        if as_served:
            model = quantized(model, info.get("quantization", "float32"))
        return model, tokenizer
    if not path.exists():
        raise FileNotFoundError(
            f"{path} does not exist. Pass the --workdir of a `keras-transformer "
            "train` run or a folder written by `keras-transformer export`."
        )
    if not path.is_dir():
        raise NotADirectoryError(
            f"{path} is a file, not a folder. Pass the --workdir of a "
            "`keras-transformer train` run or a folder written by "
            "`keras-transformer export`."
        )
    _check_translation(path)
    return RunFolder(path).load(weights)


def _check_translation(path: Path) -> None:
    """Refuses a run (its ``config.json``) or an export (its ``export.json``;
    an image export holds no ``tokenizer/``) of another kind, in one line."""
    kind = run_kind(path)
    if kind != "translation":
        run = is_run_dir(path)
        what, source = ("a run", "config.json") if run else ("an export", "export.json")
        raise ValueError(
            f"{path} is {what} of kind {kind!r} (its {source}), not a translation "
            "run or export: a Translator loads translation runs and exports."
        )


__all__ = ["load_translator"]


def with_export_settings(
    path: str | os.PathLike[str],
    given: dict[str, Any],
    names: Collection[str] | None = None,
) -> dict[str, Any]:
    """`given` (a call's settings) over the `DecodeSettings` fields that the
    export folder `path` was written with (its ``export.json``: beam size,
    alpha, stopping rule, lengths), so that a translator or a new export of
    the folder decodes as its SavedModel does unless told otherwise; with
    `names`, only those fields (what an export format takes). `given` alone
    for a training run, or when it holds a whole ``settings`` object.

    Raises:
        ValueError: (one line, naming the file) on an ``export.json`` whose
            settings this version cannot use.
    """
    if "settings" in given or not is_export_dir(path):
        return dict(given)
    fields = {field.name for field in dataclasses.fields(DecodeSettings)}
    stored = {k: v for k, v in read_export_info(path).items() if k in fields}
    try:
        DecodeSettings(**stored)
    except (TypeError, ValueError) as error:
        raise ValueError(
            f"{Path(path) / EXPORT_INFO_FILE} holds decoding settings this version "
            f"cannot use ({error}); export the run again to rewrite it."
        ) from None
    kept = {k: v for k, v in stored.items() if names is None or k in names}
    return {**kept, **given}

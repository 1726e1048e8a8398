"""Folders on disk: a training run (`RunFolder`) and an export (`is_export_dir`).

A training run's folder (``keras-transformer train --workdir``) holds::

    config.json           the resolved TrainConfig
    tokenizer/            the shared SubwordTokenizer (tokenizer.model/.json)
    checkpoints/          tf.train checkpoints ckpt-<step> (model + optimizer),
                          and checkpoints.json (the tokenizer they belong to)
    best.weights.h5       the weights with the best validation BLEU (+ best.json)
    averaged.weights.h5   the average of the last checkpoints (§6.1, + averaged.json)
    logs/                 TensorBoard logs
    translations/         hypotheses written by ``keras-transformer evaluate``
    result.json           the final scores

An export folder (``keras-transformer export``) holds a SavedModel plus
``model.keras``, ``tokenizer/`` and ``export.json``.

This module knows these layouts and nothing about training: it reads the
model section of ``config.json`` (a `TransformerConfig`) and leaves the full
`kt.training.TrainConfig` to `kt.training`, which sits above it. The
translator (`kt.translation.load_translator`), the exporter and
`kt.training.load_trained_model` all open runs through `RunFolder`.

Example:
>>> from keras_transformer.runs import RunFolder
>>> run = RunFolder("runs/dates")  # doctest: +SKIP
>>> model, tokenizer = run.load(weights="average")  # doctest: +SKIP

Reference: Vaswani et al. (2017), §6.1 (checkpoint averaging).
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import keras
import tensorflow as tf

from keras_transformer.data.tokenizer import SubwordTokenizer
from keras_transformer.models import TransformerConfig, build_transformer, get_preset

__all__ = [
    "AVERAGED_WEIGHTS",
    "BEST_INFO",
    "BEST_WEIGHTS",
    "CHECKPOINT_DIR",
    "CONFIG_FILE",
    "EXPORT_INFO_FILE",
    "EXPORT_MODEL_FILE",
    "LOG_DIR",
    "RESULT_FILE",
    "TOKENIZER_DIR",
    "TRANSLATIONS_DIR",
    "WEIGHTS",
    "RunFolder",
    "check_tokenizer",
    "checkpoint_paths",
    "checkpoint_step",
    "is_export_dir",
    "is_run_dir",
    "load_export",
    "restore_checkpoint",
    "write_checkpoint_metadata",
]

CONFIG_FILE = "config.json"
TOKENIZER_DIR = "tokenizer"
CHECKPOINT_DIR = "checkpoints"
CHECKPOINT_METADATA = "checkpoints.json"
BEST_WEIGHTS = "best.weights.h5"
BEST_INFO = "best.json"
AVERAGED_WEIGHTS = "averaged.weights.h5"
AVERAGED_INFO = "averaged.json"
LOG_DIR = "logs"
TRANSLATIONS_DIR = "translations"
RESULT_FILE = "result.json"
#: The Keras model and settings next to an exported SavedModel.
EXPORT_MODEL_FILE = "model.keras"
EXPORT_INFO_FILE = "export.json"
#: The named weights of a run (anything else is a path).
WEIGHTS = ("last", "best", "average")


# ------------------------------------------------------------- checkpoints
def checkpoint_paths(checkpoint_dir: str | os.PathLike[str]) -> list[str]:
    """The checkpoints in a folder, oldest first (``.../ckpt-<step>``)."""
    state = tf.train.get_checkpoint_state(str(checkpoint_dir))
    if state is None:
        return []
    return list(state.all_model_checkpoint_paths)


def checkpoint_step(path: str) -> int:
    """The step a checkpoint was saved at, from its name ``ckpt-<step>``."""
    return int(path.rsplit("-", 1)[-1])


def restore_checkpoint(model: keras.Model, path: str) -> None:
    """Loads the model weights of a tf.train checkpoint (not the optimizer's)."""
    tf.train.Checkpoint(model=model).restore(path).expect_partial()


def write_checkpoint_metadata(
    checkpoint_dir: str | os.PathLike[str], tokenizer: SubwordTokenizer
) -> None:
    """Records which tokenizer the checkpoints in `checkpoint_dir` belong to."""
    directory = Path(checkpoint_dir)
    directory.mkdir(parents=True, exist_ok=True)
    metadata = {
        "vocabulary_size": tokenizer.vocabulary_size,
        "tokenizer_fingerprint": tokenizer.fingerprint,
    }
    (directory / CHECKPOINT_METADATA).write_text(json.dumps(metadata, indent=2) + "\n")


def check_tokenizer(
    checkpoint_dir: str | os.PathLike[str], tokenizer: SubwordTokenizer
) -> None:
    """Refuses a tokenizer that is not the one the checkpoints were trained with.

    Raises:
        ValueError: naming the vocabulary size or fingerprint that differs.
    """
    path = Path(checkpoint_dir) / CHECKPOINT_METADATA
    if not path.is_file() or not checkpoint_paths(checkpoint_dir):
        return
    metadata = json.loads(path.read_text())
    try:
        tokenizer.check_compatible(
            expected_vocabulary_size=int(metadata["vocabulary_size"]),
            expected_fingerprint=metadata.get("tokenizer_fingerprint"),
        )
    except ValueError as e:
        raise ValueError(
            f"{e} (checkpoints in {path.parent}). Restore the tokenizer/ folder "
            "of this run, or start a new run in another work directory."
        ) from e


# ---------------------------------------------------------------- the run
def is_run_dir(path: str | os.PathLike[str]) -> bool:
    """Whether `path` is a training run (it holds ``config.json``)."""
    return (Path(path) / CONFIG_FILE).is_file()


def _model_config(model: Any) -> TransformerConfig:
    """The `TransformerConfig` of a config file's ``model`` section."""
    if isinstance(model, str):
        return get_preset(model)
    if not isinstance(model, Mapping):
        raise ValueError(
            f"The model section of {CONFIG_FILE} must be a preset name or a "
            f"mapping of TransformerConfig fields. Received: {model!r}"
        )
    values = dict(model)
    preset = values.pop("preset", None)
    if preset is None:
        return TransformerConfig.from_dict(values)
    base = get_preset(preset)
    if isinstance(values.get("optimizer"), Mapping):
        values["optimizer"] = dataclasses.replace(base.optimizer, **values["optimizer"])
    return base.replace(**values)


class RunFolder:
    """The work directory of one training run: its files, config and weights.

    Args:
        path: the folder (``keras-transformer train --workdir``). It need not
            exist yet: the trainer creates it; readers check with `check`.

    Example:
    >>> run = RunFolder("runs/dates")  # doctest: +SKIP
    >>> run.checkpoints()[-1]  # doctest: +SKIP
    'runs/dates/checkpoints/ckpt-600'
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"RunFolder({str(self.path)!r})"

    # -- layout ---------------------------------------------------------------
    @property
    def config_file(self) -> Path:
        return self.path / CONFIG_FILE

    @property
    def tokenizer_dir(self) -> Path:
        return self.path / TOKENIZER_DIR

    @property
    def checkpoint_dir(self) -> Path:
        return self.path / CHECKPOINT_DIR

    @property
    def log_dir(self) -> Path:
        return self.path / LOG_DIR

    @property
    def translations_dir(self) -> Path:
        return self.path / TRANSLATIONS_DIR

    @property
    def best_weights(self) -> Path:
        return self.path / BEST_WEIGHTS

    @property
    def averaged_weights(self) -> Path:
        return self.path / AVERAGED_WEIGHTS

    @property
    def result_file(self) -> Path:
        return self.path / RESULT_FILE

    # -- reading --------------------------------------------------------------
    def check(self) -> RunFolder:
        """Returns self if the folder is a run; raises FileNotFoundError if not."""
        if not self.config_file.is_file():
            raise FileNotFoundError(
                f"{self.path} is not a training work directory: {CONFIG_FILE} is "
                "missing. Pass the --workdir of a `keras-transformer train` run."
            )
        return self

    def raw_config(self) -> dict[str, Any]:
        """The content of ``config.json`` (`kt.training.TrainConfig.load` parses it)."""
        self.check()
        try:
            values = json.loads(self.config_file.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise ValueError(f"{self.config_file} is not valid JSON: {e}") from e
        if not isinstance(values, dict):
            raise ValueError(f"{self.config_file} must hold a JSON object.")
        return values

    def model_config(
        self, tokenizer: SubwordTokenizer | None = None
    ) -> TransformerConfig:
        """The run's `TransformerConfig`, with the tokenizer's vocabulary size."""
        config = _model_config(self.raw_config().get("model", "tiny"))
        tokenizer = tokenizer or self.tokenizer()
        return config.replace(vocabulary_size=tokenizer.vocabulary_size)

    def tokenizer(self) -> SubwordTokenizer:
        """The run's tokenizer, checked against its checkpoints."""
        tokenizer = SubwordTokenizer.load(self.check().tokenizer_dir)
        check_tokenizer(self.checkpoint_dir, tokenizer)
        return tokenizer

    def checkpoints(self) -> list[str]:
        """The kept checkpoints, oldest first."""
        return checkpoint_paths(self.checkpoint_dir)

    def build_model(self, tokenizer: SubwordTokenizer | None = None) -> keras.Model:
        """A freshly initialized model of the run's configuration."""
        return build_transformer(self.model_config(tokenizer))

    def restore(self, model: keras.Model, weights: str = "last") -> None:
        """Loads `weights` into `model`.

        Args:
            model: a model of the run's configuration (`build_model`).
            weights: ``"last"`` (the newest checkpoint), ``"best"`` (best
                validation BLEU), ``"average"`` (``average-checkpoints``,
                §6.1), or the path of a checkpoint prefix or a
                ``.weights.h5`` file.
        """
        if weights == "last":
            paths = self.checkpoints()
            if not paths:
                raise FileNotFoundError(
                    f"{self.checkpoint_dir} holds no checkpoint yet: train first, "
                    "or pass --weights best/average/<file>."
                )
            restore_checkpoint(model, paths[-1])
        elif weights in ("best", "average"):
            path = self.best_weights if weights == "best" else self.averaged_weights
            if not path.is_file():
                how = (
                    "it is written when train.keep_best is true and a validation ran"
                    if weights == "best"
                    else "run `keras-transformer average-checkpoints` first"
                )
                raise FileNotFoundError(f"{path} does not exist: {how}.")
            model.load_weights(path)
        elif str(weights).endswith(".weights.h5"):
            model.load_weights(weights)
        else:
            restore_checkpoint(model, str(weights))

    def load(self, weights: str = "last") -> tuple[keras.Model, SubwordTokenizer]:
        """The trained model (with `weights`, see `restore`) and its tokenizer."""
        tokenizer = self.tokenizer()
        model = self.build_model(tokenizer)
        self.restore(model, weights)
        return model, tokenizer

    def weights_step(self, weights: str = "last") -> int:
        """The training step of the named weights (0 when unknown)."""
        try:
            if weights == "last":
                paths = self.checkpoints()
                return checkpoint_step(paths[-1]) if paths else 0
            if weights == "best":
                info = json.loads((self.path / BEST_INFO).read_text())
                return int(info["step"])
            if weights == "average":
                info = json.loads((self.path / AVERAGED_INFO).read_text())
                return int(info["steps"][-1])
        except (OSError, ValueError, KeyError, IndexError):
            return 0
        return 0


# ----------------------------------------------------------------- exports
def is_export_dir(path: str | os.PathLike[str]) -> bool:
    """Whether `path` holds ``model.keras`` and ``tokenizer/`` (an export)."""
    path = Path(path)
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
    return model, tokenizer, info

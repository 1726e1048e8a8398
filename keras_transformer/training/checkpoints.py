"""Checkpoints of a run, their averaging (§6.1), and loading a trained model.

A run's work directory holds::

    config.json           the resolved TrainConfig
    tokenizer/            the shared SubwordTokenizer (tokenizer.model/.json)
    checkpoints/          tf.train checkpoints ckpt-<step> (model + optimizer,
                          so the step and the learning rate resume exactly),
                          the last `train.keep_checkpoints` of them, and
                          checkpoints.json (the tokenizer they were trained with)
    best.weights.h5       the weights with the best validation BLEU
    averaged.weights.h5   written by `average_checkpoints`
    logs/                 TensorBoard logs
    result.json           the final scores
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from keras_transformer.data import SubwordTokenizer
from keras_transformer.models import build_transformer
from keras_transformer.training.config import TrainConfig

__all__ = [
    "CONFIG_FILE",
    "average_checkpoints",
    "checkpoint_paths",
    "check_tokenizer",
    "load_trained_model",
    "weights_checksum",
    "write_checkpoint_metadata",
]

CONFIG_FILE = "config.json"
CHECKPOINT_DIR = "checkpoints"
TOKENIZER_DIR = "tokenizer"
BEST_WEIGHTS = "best.weights.h5"
BEST_INFO = "best.json"
AVERAGED_WEIGHTS = "averaged.weights.h5"
_METADATA = "checkpoints.json"


def checkpoint_paths(checkpoint_dir: str | os.PathLike[str]) -> list[str]:
    """The checkpoints in a folder, oldest first (``.../ckpt-<step>``)."""
    state = tf.train.get_checkpoint_state(str(checkpoint_dir))
    if state is None:
        return []
    return list(state.all_model_checkpoint_paths)


def checkpoint_step(path: str) -> int:
    """The step a checkpoint was saved at, from its name ``ckpt-<step>``."""
    return int(path.rsplit("-", 1)[-1])


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
    (directory / _METADATA).write_text(json.dumps(metadata, indent=2) + "\n")


def check_tokenizer(
    checkpoint_dir: str | os.PathLike[str], tokenizer: SubwordTokenizer
) -> None:
    """Refuses a tokenizer that is not the one the checkpoints were trained with.

    Raises:
        ValueError: naming the vocabulary size or fingerprint that differs.
    """
    path = Path(checkpoint_dir) / _METADATA
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


def weights_checksum(model: keras.Model) -> str:
    """A short, order-sensitive checksum of all weights (to compare replicas)."""
    import hashlib

    digest = hashlib.sha256()
    for weight in model.weights:
        digest.update(
            np.ascontiguousarray(keras.ops.convert_to_numpy(weight)).tobytes()
        )
    return digest.hexdigest()[:16]


def _load_run(workdir: Path) -> tuple[TrainConfig, SubwordTokenizer]:
    config_path = workdir / CONFIG_FILE
    if not config_path.is_file():
        raise FileNotFoundError(
            f"{workdir} is not a training work directory: {CONFIG_FILE} is "
            "missing. Pass the --workdir of a `keras-transformer train` run."
        )
    config = TrainConfig.load(config_path)
    tokenizer = SubwordTokenizer.load(workdir / TOKENIZER_DIR)
    return config, tokenizer


def _build(config: TrainConfig, tokenizer: SubwordTokenizer) -> keras.Model:
    model = build_transformer(
        config.model.replace(vocabulary_size=tokenizer.vocabulary_size)
    )
    return model


def _restore_model(model: keras.Model, path: str) -> None:
    tf.train.Checkpoint(model=model).restore(path).expect_partial()


def average_checkpoints(
    workdir: str | os.PathLike[str],
    last: int = 5,
    output: str | os.PathLike[str] | None = None,
) -> Path:
    """Averages the weights of the last `last` checkpoints of a run (§6.1).

    "For the base models, we used a single model obtained by averaging the
    last 5 checkpoints, which were written at 10-minute intervals. For the
    big models, we averaged the last 20 checkpoints." Each weight is the
    arithmetic mean of its values in the checkpoints (optimizer state is
    not averaged).

    Args:
        workdir: the run's work directory.
        last: how many of the newest checkpoints to average.
        output: the `.weights.h5` file to write (default
            ``<workdir>/averaged.weights.h5``); load it into
            `build_transformer(config)` with `load_weights`, or use
            `load_trained_model(workdir, weights="average")`.

    Returns:
        The path of the averaged weights.

    Raises:
        ValueError: when the run has fewer than `last` checkpoints.
    """
    workdir = Path(workdir)
    if isinstance(last, bool) or not isinstance(last, int) or last < 1:
        raise ValueError(f"`last` must be a positive integer. Received: {last!r}")
    config, tokenizer = _load_run(workdir)
    checkpoint_dir = workdir / CHECKPOINT_DIR
    check_tokenizer(checkpoint_dir, tokenizer)
    paths = checkpoint_paths(checkpoint_dir)
    if len(paths) < last:
        raise ValueError(
            f"Cannot average the last {last} checkpoints: {checkpoint_dir} has "
            f"{len(paths)} ({[Path(p).name for p in paths]}). Average fewer "
            "(--last), or keep more with train.keep_checkpoints."
        )
    model = _build(config, tokenizer)
    total: list[np.ndarray] | None = None
    for path in paths[-last:]:
        _restore_model(model, path)
        values = [np.asarray(w, "float64") for w in model.get_weights()]
        total = (
            values
            if total is None
            else [t + v for t, v in zip(total, values, strict=True)]
        )
    assert total is not None
    model.set_weights([t / last for t in total])
    output = Path(output) if output is not None else workdir / AVERAGED_WEIGHTS
    if not output.name.endswith(".weights.h5"):
        raise ValueError(
            f"The output file must end in .weights.h5. Received: {str(output)!r}"
        )
    output.parent.mkdir(parents=True, exist_ok=True)
    model.save_weights(output)
    info = {
        "checkpoints": [Path(p).name for p in paths[-last:]],
        "steps": [checkpoint_step(p) for p in paths[-last:]],
    }
    output.with_name(output.name.replace(".weights.h5", ".json")).write_text(
        json.dumps(info, indent=2) + "\n"
    )
    return output


def load_trained_model(
    workdir: str | os.PathLike[str], weights: str = "last"
) -> tuple[keras.Model, SubwordTokenizer, TrainConfig]:
    """Rebuilds a trained model from its work directory, for inference.

    Args:
        workdir: the run's work directory.
        weights: ``"last"`` (the newest checkpoint), ``"best"`` (best
            validation BLEU), ``"average"`` (from `average_checkpoints`), or
            the path of a checkpoint prefix or a ``.weights.h5`` file.

    Returns:
        ``(model, tokenizer, config)``.
    """
    workdir = Path(workdir)
    config, tokenizer = _load_run(workdir)
    checkpoint_dir = workdir / CHECKPOINT_DIR
    check_tokenizer(checkpoint_dir, tokenizer)
    model = _build(config, tokenizer)
    if weights == "last":
        paths = checkpoint_paths(checkpoint_dir)
        if not paths:
            raise FileNotFoundError(f"{checkpoint_dir} holds no checkpoint yet.")
        _restore_model(model, paths[-1])
    elif weights in ("best", "average"):
        path = workdir / (BEST_WEIGHTS if weights == "best" else AVERAGED_WEIGHTS)
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
        _restore_model(model, str(weights))
    return model, tokenizer, config

"""The tiny translation model and export that the export, serving and
translation tests share (`tiny_translator`; its SavedModel export is the
session fixture `exported` of tests/conftest.py)."""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from keras_transformer.data import (
    SubwordTokenizer,
    TextPairs,
    synthetic_dates,
)
from keras_transformer.losses import MaskedSparseCrossEntropy
from keras_transformer.models import build_transformer, presets
from tests.shared_builds import built_once

START, END = SubwordTokenizer.START_ID, SubwordTokenizer.END_ID
LONG = "Donnerstag, 5. Januar 2023 " * 60  # ~300 subword tokens
#: Dates the model has learned, then empty, long and non-ASCII inputs.
INPUTS = [
    *synthetic_dates(6, seed=11).sources,
    "",
    "   ",
    LONG,
    "Grüße aus München, 3. März 2001",
    "el año 2000, niño, señor",
    "2020年3月5日 中文",
]


def pad_rows(rows: list[list[int]]) -> np.ndarray:
    """`rows` of ids as one int32 matrix, padded with 0 (PAD) on the right."""
    width = max(len(row) for row in rows)
    padded = np.zeros((len(rows), width), "int32")
    for i, row in enumerate(rows):
        padded[i, : len(row)] = row
    return padded


def fit_arrays(
    tokenizer: SubwordTokenizer, pairs: TextPairs
) -> tuple[tuple[np.ndarray, np.ndarray], np.ndarray]:
    """`model.fit` arrays of `pairs`: ((sources + END, START + targets),
    targets + END), each padded with `pad_rows`."""
    sources = pad_rows([ids + [END] for ids in tokenizer.encode(pairs.sources)])
    targets = tokenizer.encode(pairs.targets)
    inputs = pad_rows([[START, *ids] for ids in targets])
    labels = pad_rows([[*ids, END] for ids in targets])
    return (sources, inputs), labels


@functools.cache
def tiny_translator() -> tuple[keras.Model, SubwordTokenizer]:
    """A one-layer model fit for ~190 steps on 400 synthetic dates (~10 s).

    Its translations are imperfect but not degenerate: different sources give
    different, date-like outputs that end with END. Trained once per test
    session (`built_once`); every process loads the same saved weights.
    """
    folder = built_once("tiny_translator", _train_tiny_translator)
    model = keras.saving.load_model(folder / "model.keras")
    return model, SubwordTokenizer.load(folder)


def another_tokenizer() -> SubwordTokenizer:
    """A tokenizer of `tiny_translator`'s size learned from other dates: what
    a tokenizer copied in from another export is (same size, other pieces)."""
    pairs = synthetic_dates(400, seed=1)
    return SubwordTokenizer.train([*pairs.sources, *pairs.targets], vocabulary_size=120)


def _train_tiny_translator(folder: Path) -> None:
    """`tiny_translator`'s training: ``model.keras`` and the tokenizer."""
    keras.utils.set_random_seed(0)
    pairs = synthetic_dates(400, seed=0)
    tokenizer = SubwordTokenizer.train(
        [*pairs.sources, *pairs.targets], vocabulary_size=120
    )
    model = tiny_model(tokenizer)
    features, labels = fit_arrays(tokenizer, pairs)
    model.fit(features, labels, batch_size=32, epochs=15, verbose=0)
    model.save(folder / "model.keras")
    tokenizer.save(folder)


def tiny_model(tokenizer: SubwordTokenizer, **compile_options: Any) -> keras.Model:
    """The tiny translator's untrained model (one layer each side, d_model
    32), compiled for a plain `fit`: Adam 3e-3, no label smoothing;
    `compile_options` go on to `Model.compile`."""
    config = presets["tiny"].replace(
        vocabulary_size=tokenizer.vocabulary_size,
        num_encoder_layers=1,
        num_decoder_layers=1,
        d_model=32,
        d_ff=64,
        num_heads=2,
        dropout=0.0,
    )
    model = build_transformer(config)
    model.compile(
        optimizer=keras.optimizers.Adam(3e-3),
        loss=MaskedSparseCrossEntropy(label_smoothing=0.0),
        **compile_options,
    )
    # Slots built before fit, not inside its first traced step (which
    # Keras would then trace twice): the same updates, about 5 s sooner.
    model.optimizer.build(model.trainable_variables)
    return model


def child_env() -> dict[str, str]:
    """A quiet, small child process that cannot find this checkout by path."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(
        TF_CPP_MIN_LOG_LEVEL="3",
        TF_NUM_INTEROP_THREADS="1",
        TF_NUM_INTRAOP_THREADS="2",
        OMP_NUM_THREADS="1",
    )
    return env


def served_translations(loaded: Any, sentences: list[str]) -> list[str]:
    """What `loaded` (a SavedModel) translates `sentences` to, by `serving_default`."""
    got = loaded.signatures["serving_default"](sentences=tf.constant(sentences))
    return [t.decode("utf-8") for t in got["translations"].numpy()]


def run_like_folder(path: Path) -> Path:
    """A folder laid out as a training run: config, checkpoints, tokenizer, logs."""
    files_in_run = {
        "config.json": '{"kind": "translation"}\n',
        "checkpoints/checkpoint": 'model_checkpoint_path: "ckpt-2"\n',
        "checkpoints/ckpt-2.index": "index",
        "checkpoints/ckpt-2.data-00000-of-00001": "weights",
        "tokenizer/tokenizer.model": "sentencepiece",
        "tokenizer/tokenizer.json": "{}\n",
        "logs/train/events.out.tfevents.1.host": "events",
    }
    for name, text in files_in_run.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    return path


def transposes_by_dtype(export_dir: Path) -> dict[str, list[str]]:
    """The names of the ``Transpose`` nodes in an export's functions, by
    dtype. TensorFlow's oneDNN build logs "E0000 ... oneDNN supports DT_INT64
    only on platforms with AVX-512" on stderr at the first integer
    transpose it runs, on CPUs it does not count (this project's AMD
    machines): an export should hold none."""
    from tensorflow.core.protobuf import saved_model_pb2

    saved = saved_model_pb2.SavedModel()
    saved.ParseFromString((export_dir / "saved_model.pb").read_bytes())
    found: dict[str, list[str]] = {}
    for function in saved.meta_graphs[0].graph_def.library.function:
        for node in function.node_def:
            if node.op == "Transpose":
                dtype = tf.dtypes.as_dtype(node.attr["T"].type).name
                found.setdefault(dtype, []).append(node.name)
    return found

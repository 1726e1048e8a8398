"""TranslationTrainer: loss normalisation, accumulation, clipping, precision."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.losses import MaskedSparseCrossEntropy
from keras_transformer.models import build_transformer, presets
from keras_transformer.training import TranslationTrainer, accumulation_dataset

CONFIG = presets["tiny"].replace(
    vocabulary_size=50,
    num_encoder_layers=1,
    num_decoder_layers=1,
    d_model=16,
    d_ff=32,
    num_heads=2,
    dropout=0.0,
)


def _batch(rows: int, length: int = 7, seed: int = 0):
    """Random pairs with random padding; every row has at least one token."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(4, 50, size=(3, rows, length)).astype("int32")
    lengths = rng.integers(1, length + 1, size=(3, rows))
    positions = np.arange(length)
    for i in range(3):
        ids[i][positions[None, :] >= lengths[i][:, None]] = 0
    return (ids[0], ids[1]), ids[2]


def _trainer(optimizer, clipnorm=None, dtype=None):
    keras.utils.set_random_seed(3)
    transformer = build_transformer(CONFIG, dtype=dtype)
    trainer = TranslationTrainer(transformer, label_smoothing=0.1, clipnorm=clipnorm)
    trainer.compile(optimizer=optimizer)
    optimizer.build(transformer.trainable_variables)
    return trainer


def _one_step(trainer, element):
    """Runs the compiled train step on one element; returns the weight change."""
    before = [np.array(w) for w in trainer.transformer.trainable_weights]
    dataset = tf.data.Dataset.from_tensors(element)
    trainer.fit(dataset, epochs=1, steps_per_epoch=1, verbose=0, shuffle=False)
    after = [np.array(w) for w in trainer.transformer.trainable_weights]
    return [a - b for a, b in zip(after, before, strict=True)]


def test_loss_is_the_masked_label_smoothed_mean():
    trainer = _trainer(keras.optimizers.SGD(0.0))
    (source, target), labels = _batch(5)
    logs = trainer.evaluate(
        tf.data.Dataset.from_tensors(((source, target), labels)),
        verbose=0,
        return_dict=True,
    )
    logits = trainer.transformer([source, target])
    expected = MaskedSparseCrossEntropy(label_smoothing=0.1)(labels, logits)
    np.testing.assert_allclose(logs["loss"], float(expected), rtol=1e-5)
    assert 0.0 <= logs["token_accuracy"] <= 1.0 and logs["perplexity"] > 1.0


def test_accumulating_two_batches_equals_one_step_on_the_concatenation():
    """k=2 on batches of B rows == one update on the 2B rows (to float rounding).

    The odd row count also checks that `accumulation_dataset` pads with rows
    that do not change the gradient. Tolerance: relative 1e-4 of the update
    (float32 sums in a different order).
    """
    rows = 7
    (source, target), labels = _batch(rows)
    whole = _one_step(_trainer(keras.optimizers.SGD(1.0)), ((source, target), labels))

    folded = accumulation_dataset(
        tf.data.Dataset.from_tensors(((source, target), labels)), 2
    )
    element = next(iter(folded))
    assert tuple(element[1].shape) == (4, 2, 7)
    accumulated = _one_step(_trainer(keras.optimizers.SGD(1.0)), element)

    scale = max(np.abs(d).max() for d in whole)
    assert scale > 1e-4  # the step really moved the weights
    for a, b in zip(accumulated, whole, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-4 * scale, rtol=0)


def test_accumulation_counts_one_optimizer_update():
    optimizer = keras.optimizers.Adam(1e-3)
    trainer = _trainer(optimizer)
    (source, target), labels = _batch(6)
    element = next(
        iter(
            accumulation_dataset(
                tf.data.Dataset.from_tensors(((source, target), labels)), 3
            )
        )
    )
    _one_step(trainer, element)
    assert int(optimizer.iterations) == 1


def test_clipnorm_clips_the_global_gradient_norm():
    clipnorm = 1e-3
    trainer = _trainer(keras.optimizers.SGD(1.0), clipnorm=clipnorm)
    change = _one_step(trainer, _batch(4))
    norm = np.sqrt(sum(float(np.sum(d.astype("float64") ** 2)) for d in change))
    np.testing.assert_allclose(norm, clipnorm, rtol=1e-3)


@pytest.mark.parametrize("precision", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_step(precision):
    optimizer = keras.optimizers.Adam(1e-3)
    if precision == "mixed_float16":
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    trainer = _trainer(optimizer, dtype=precision, clipnorm=1.0)
    assert trainer.transformer.layers[2].compute_dtype in ("float16", "bfloat16")
    dataset = tf.data.Dataset.from_tensors(_batch(4)).repeat()
    history = trainer.fit(
        dataset, epochs=1, steps_per_epoch=3, verbose=0, shuffle=False
    )
    assert np.isfinite(history.history["loss"][-1])
    assert int(optimizer.iterations) == 3
    # Variables stay float32 (only the computation is in low precision).
    assert all(w.dtype == "float32" for w in trainer.transformer.trainable_weights)


@pytest.mark.slow  # XLA compiles two training steps (about 15 s)
def test_xla_compiled_accumulation_step_matches_the_plain_one():
    (source, target), labels = _batch(6)
    element = next(
        iter(
            accumulation_dataset(
                tf.data.Dataset.from_tensors(((source, target), labels)), 2
            )
        )
    )
    plain = _one_step(_trainer(keras.optimizers.SGD(1.0)), element)
    trainer = _trainer(keras.optimizers.SGD(1.0))
    trainer.compile(optimizer=trainer.optimizer, jit_compile=True)
    assert trainer.jit_compile
    compiled = _one_step(trainer, element)
    scale = max(np.abs(d).max() for d in plain)
    for a, b in zip(compiled, plain, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-4 * scale, rtol=0)


def test_train_on_batch_is_one_fit_step():
    """Keras hands `train_on_batch` data as ``(x, y, sample_weight)``."""
    (source, target), labels = _batch(5)
    expected = _one_step(
        _trainer(keras.optimizers.SGD(1.0)), ((source, target), labels)
    )
    trainer = _trainer(keras.optimizers.SGD(1.0))
    before = [np.array(w) for w in trainer.transformer.trainable_weights]
    logs = trainer.train_on_batch((source, target), labels, return_dict=True)
    assert set(logs) == {"loss", "token_accuracy", "perplexity"}
    assert np.isfinite(logs["loss"]) and int(trainer.optimizer.iterations) == 1
    after = [np.array(w) for w in trainer.transformer.trainable_weights]
    scale = max(np.abs(d).max() for d in expected)
    for a, b, change in zip(after, before, expected, strict=True):
        np.testing.assert_allclose(a - b, change, atol=1e-5 * scale, rtol=0)
    # Without return_dict: the values alone (Keras' default).
    assert np.all(np.isfinite(trainer.train_on_batch((source, target), labels)))
    assert int(trainer.optimizer.iterations) == 2
    # And with accumulated batches (a new trainer: another input rank).
    trainer = _trainer(keras.optimizers.SGD(1.0))
    element = next(
        iter(
            accumulation_dataset(
                tf.data.Dataset.from_tensors(((source, target), labels)), 2
            )
        )
    )
    trainer.train_on_batch(*element)
    assert int(trainer.optimizer.iterations) == 1


def test_test_on_batch_and_predict_on_batch():
    trainer = _trainer(keras.optimizers.SGD(0.0))
    (source, target), labels = _batch(4)
    logs = trainer.test_on_batch((source, target), labels, return_dict=True)
    expected = trainer.evaluate(
        tf.data.Dataset.from_tensors(((source, target), labels)),
        verbose=0,
        return_dict=True,
    )
    for name in ("loss", "token_accuracy", "perplexity"):
        np.testing.assert_allclose(logs[name], expected[name], rtol=1e-6)
    logits = trainer.predict_on_batch((source, target))
    assert logits.shape == (4, 7, 50)
    np.testing.assert_allclose(
        logits, trainer.transformer([source, target]), rtol=1e-5, atol=1e-5
    )


def test_sample_weights_and_missing_labels_are_refused():
    trainer = _trainer(keras.optimizers.SGD(0.1))
    (source, target), labels = _batch(4)
    with pytest.raises(ValueError, match="sample_weight"):
        trainer.train_on_batch((source, target), labels, sample_weight=np.ones(4))
    with pytest.raises(ValueError, match="labels"):
        trainer.test_on_batch((source, target))

"""Trains the same model on the same global batches with one and two replicas.

Run as a script (the two logical CPU devices must be configured before
TensorFlow initialises); prints one JSON line with the final losses.
"""

import json

from keras_transformer.training import configure_cpu_devices

configure_cpu_devices(2)

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_transformer.losses import MaskedSparseCrossEntropy  # noqa: E402
from keras_transformer.models import build_transformer, presets  # noqa: E402
from keras_transformer.schedules import OptimizerConfig, paper_adam  # noqa: E402
from keras_transformer.training import (  # noqa: E402
    TranslationTrainer,
    accumulation_dataset,
    make_strategy,
    weights_checksum,
)

STEPS = 3
CONFIG = presets["tiny"].replace(
    vocabulary_size=60,
    num_encoder_layers=1,
    num_decoder_layers=1,
    d_model=32,
    d_ff=64,
    num_heads=2,
    dropout=0.0,
)


def batches(count: int, rows: int = 8, length: int = 9):
    rng = np.random.default_rng(0)
    ids = rng.integers(4, 60, size=(3, count, rows, length)).astype("int32")
    lengths = rng.integers(1, length + 1, size=(3, count, rows))
    ids[np.arange(length) >= lengths[..., None]] = 0
    return (ids[0], ids[1]), ids[2]


def run(strategy: tf.distribute.Strategy, accumulation: int) -> dict:
    keras.utils.set_random_seed(1)
    with strategy.scope():
        transformer = build_transformer(CONFIG)
        optimizer = paper_adam(CONFIG.d_model, OptimizerConfig(warmup_steps=5))
        trainer = TranslationTrainer(transformer, label_smoothing=0.1, clipnorm=1.0)
        trainer.compile(optimizer=optimizer)
        optimizer.build(transformer.trainable_variables)
    initial = weights_checksum(transformer)
    (eval_source, eval_target), eval_labels = batches(1, rows=16, length=11)

    def loss() -> float:
        logits = transformer([eval_source[0], eval_target[0]], training=False)
        return float(MaskedSparseCrossEntropy(0.1)(eval_labels[0], logits))

    initial_loss = loss()
    # Each update sees 16 rows: one batch of 16, or k=2 batches of 8.
    (source, target), labels = batches(STEPS, rows=16)
    dataset = tf.data.Dataset.from_tensor_slices(((source, target), labels))
    dataset = accumulation_dataset(dataset, accumulation)
    trainer.fit(dataset, epochs=1, steps_per_epoch=STEPS, verbose=0, shuffle=False)
    return {
        "replicas": strategy.num_replicas_in_sync,
        "initial": initial,
        "iterations": int(optimizer.iterations.numpy()),
        "initial_loss": initial_loss,
        "loss": loss(),
    }


# One device and one batch of 16 rows per update, against two replicas (8
# rows each), with and without accumulating k=2 batches of 8 rows (4 per
# replica) per update.
results = {
    "single_k1": run(tf.distribute.get_strategy(), 1),
    "mirrored_k1": run(make_strategy("mirrored"), 1),
    "mirrored_k2": run(make_strategy("mirrored"), 2),
}
print("RESULT " + json.dumps(results))

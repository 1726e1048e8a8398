"""Trains the same model on the same global batches with one and two replicas.

Run as a script (the two logical CPU devices must be configured before
TensorFlow initialises); prints one JSON line with the final losses. The
argument is the kind of run: ``translation`` (default), ``classification``
or ``image``.
"""

import json
import sys

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
def reviews(count: int, rows: int = 16, length: int = 9):
    """`count` batches of token ids (padded) and 0/1 labels."""
    rng = np.random.default_rng(0)
    ids = rng.integers(4, 60, size=(count, rows, length)).astype("int32")
    labels = rng.integers(0, 2, size=(count, rows)).astype("int32")
    ids[..., 0] = np.where(labels == 1, 5, 6)  # something to learn
    lengths = rng.integers(1, length + 1, size=(count, rows))
    ids[np.arange(length) >= lengths[..., None]] = 0
    return ids, labels


def run_classification(strategy: tf.distribute.Strategy, accumulation: int) -> dict:
    keras.utils.set_random_seed(1)
    with strategy.scope():
        classifier = build_classifier(CONFIG)
        optimizer = keras.optimizers.AdamW(3e-3, weight_decay=0.01)
        trainer = ClassificationTrainer(classifier, clipnorm=1.0)
        trainer.compile(optimizer=optimizer)
        optimizer.build(classifier.trainable_variables)
    initial = weights_checksum(classifier)
    eval_ids, eval_labels = reviews(1, rows=16, length=11)

    def loss() -> float:
        positive = classifier(eval_ids[0], training=False)
        losses = keras.losses.binary_crossentropy(eval_labels[0][:, None], positive)
        return float(np.mean(losses))

    initial_loss = loss()
    # Each update sees 16 reviews: one batch of 16, or k=2 batches of 8.
    ids, labels = reviews(STEPS)
    dataset = tf.data.Dataset.from_tensor_slices((ids, labels))
    if accumulation > 1:
        dataset = dataset.map(lambda x, y: fold(x, y, accumulation))
    trainer.fit(dataset, epochs=1, steps_per_epoch=STEPS, verbose=0, shuffle=False)
    return {
        "replicas": strategy.num_replicas_in_sync,
        "initial": initial,
        "iterations": int(optimizer.iterations.numpy()),
        "initial_loss": initial_loss,
        "loss": loss(),
    }


def run_image(strategy: tf.distribute.Strategy, accumulation: int) -> dict:
    """The Image Transformer's trainer, gradients clipped (the clip acts)."""
    from keras_transformer.models.image_transformer import build_image_transformer
    from keras_transformer.training.image import ImageTrainer, fold_image_batches
    from tests.training.helpers import small_image_model

    config = small_image_model()
    keras.utils.set_random_seed(1)
    with strategy.scope():
        model = build_image_transformer(config)
        optimizer = keras.optimizers.Adam(3e-3)
        trainer = ImageTrainer(model, clipnorm=0.05)
        trainer.compile(optimizer=optimizer)
        optimizer.build(model.trainable_variables)
    initial = weights_checksum(model)
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(STEPS + 1, 16, 4, 4, 3)).astype("int32")
    stack = trainer.stack

    def loss() -> float:
        outputs = model(images[-1], training=False)
        return float(stack.head.bits_per_dim(outputs, images[-1]))

    initial_loss = loss()
    dataset = tf.data.Dataset.from_tensor_slices({"images": images[:STEPS]})
    if accumulation > 1:
        dataset = dataset.map(lambda e: fold_image_batches(e, accumulation))
    trainer.fit(dataset, epochs=1, steps_per_epoch=STEPS, verbose=0, shuffle=False)
    return {
        "replicas": strategy.num_replicas_in_sync,
        "initial": initial,
        "iterations": int(optimizer.iterations.numpy()),
        "initial_loss": initial_loss,
        "loss": loss(),
    }


if sys.argv[1:] == ["image"]:
    run = run_image  # noqa: F811 - the kind's own run
if sys.argv[1:] == ["classification"]:
    from keras_transformer.models.classifier import build_classifier
    from keras_transformer.training.classification import ClassificationTrainer
    from keras_transformer.training.classification import _fold as fold

    run = run_classification  # noqa: F811 - the kind's own run
results = {
    "single_k1": run(tf.distribute.get_strategy(), 1),
    "mirrored_k1": run(make_strategy("mirrored"), 1),
}
results["mirrored_k2"] = run(make_strategy("mirrored"), 2)
print("RESULT " + json.dumps(results))

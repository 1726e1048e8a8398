"""What the backend tests share."""

from collections.abc import Sequence

import keras
import numpy as np


def train_embedding_model(
    optimizer: keras.optimizers.Optimizer,
    ids: Sequence[Sequence[int]] = ((1, 2, 3), (4, 5, 6)),
    dense_gradients: bool = False,
) -> list[np.ndarray]:
    """The weights of a small model with an embedding (whose gradient is sparse)
    after three training steps on `ids` with `optimizer`, from a fixed seed.

    The steps are `train_on_batch`, where the optimizer gets the embedding's
    sparse (`IndexedSlices`) gradient; with `dense_gradients`, a loop of the
    same steps that hands the optimizer every gradient made dense (repeated
    rows summed), i.e. Adam as defined on the dense gradient.
    """
    import tensorflow as tf

    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((3,), dtype="int32"),
            keras.layers.Embedding(10, 4),  # a sparse (IndexedSlices) gradient
            keras.layers.Flatten(),
            keras.layers.Dense(2),
        ]
    )
    x = np.array(ids, "int32")
    y = np.ones((len(x), 2), "float32")
    if not dense_gradients:
        model.compile(optimizer=optimizer, loss="mse")
        for _ in range(3):
            model.train_on_batch(x, y)
        return [keras.ops.convert_to_numpy(w) for w in model.weights]
    loss = keras.losses.MeanSquaredError()
    variables = model.trainable_variables
    optimizer.build(variables)
    for _ in range(3):
        with tf.GradientTape() as tape:
            value = loss(y, model(x, training=True))
        gradients = tape.gradient(value, [v.value for v in variables])
        assert isinstance(gradients[0], tf.IndexedSlices)  # the embedding's
        optimizer.apply_gradients(
            zip([tf.convert_to_tensor(g) for g in gradients], variables, strict=True)
        )
    return [keras.ops.convert_to_numpy(w) for w in model.weights]


def values_and_grads(function, *inputs, upstream=None):
    """`function(*inputs)` and its gradients with respect to every input
    (TensorFlow's tape; `upstream` is the gradient flowing into the output)."""
    import tensorflow as tf

    inputs = [tf.convert_to_tensor(x) for x in inputs]
    with tf.GradientTape() as tape:
        tape.watch(inputs)
        outputs = function(*inputs)
    grads = tape.gradient(outputs, inputs, output_gradients=upstream)
    return outputs, grads

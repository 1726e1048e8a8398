"""What the backend tests share."""

import keras
import numpy as np


def train_embedding_model(optimizer: keras.optimizers.Optimizer) -> list[np.ndarray]:
    """The weights of a small model with an embedding (whose gradient is sparse)
    after three `train_on_batch` steps with `optimizer`, from a fixed seed."""
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((3,), dtype="int32"),
            keras.layers.Embedding(10, 4),  # a sparse (IndexedSlices) gradient
            keras.layers.Flatten(),
            keras.layers.Dense(2),
        ]
    )
    model.compile(optimizer=optimizer, loss="mse")
    x = np.array([[1, 2, 3], [4, 5, 6]], "int32")
    y = np.ones((2, 2), "float32")
    for _ in range(3):
        model.train_on_batch(x, y)
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

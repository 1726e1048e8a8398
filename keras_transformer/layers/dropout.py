"""Dropout whose mask costs half the random bits on the TensorFlow backend."""

from __future__ import annotations

from typing import Any

import keras

from keras_transformer import backend


@keras.saving.register_keras_serializable(package="keras_transformer")
class Dropout(keras.layers.Dropout):
    """`keras.layers.Dropout` drawing 16 random bits per element on TensorFlow.

    The paper applies dropout (Srivastava et al., 2014) to every sub-layer's
    output and to the sums of embeddings and positional encodings (§5.4,
    "Residual Dropout"): 17 masks over whole activation tensors in a 3 + 3
    layer model, where generating the random numbers costs more than
    applying them. Keras' dropout draws a float32 uniform number (32 random
    bits) per element; on TensorFlow this layer draws one 32-bit number per
    two elements and compares each 16-bit half with `round(rate * 2^16)`.
    The drop probability is therefore the rate rounded to a multiple of
    2^-16 (0.1 becomes 0.100006), and kept values are scaled by the inverse
    of the realised keep probability, so the expected output equals the
    input exactly. Same arguments and seeding (`keras.random.SeedGenerator`)
    as Keras' layer; with `noise_shape`, on another backend, or with the
    fast paths switched off, Keras' implementation runs
    (`keras_transformer.backend.dropout`).
    """

    def call(self, inputs: Any, training: bool = False) -> Any:
        if training and self.rate > 0:
            return backend.dropout(
                inputs,
                self.rate,
                noise_shape=self.noise_shape,
                seed=self.seed_generator,
            )
        return inputs

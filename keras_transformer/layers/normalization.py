"""Layer normalization with a fused gradient on the TensorFlow backend."""

from __future__ import annotations

from typing import Any

import keras
from keras import ops

from keras_transformer import backend


@keras.saving.register_keras_serializable(package="keras_transformer")
class LayerNormalization(keras.layers.LayerNormalization):
    """`keras.layers.LayerNormalization` with fewer passes over the activations.

    The Transformer applies layer normalization (Ba et al., 2016) after every
    residual sub-layer, `LayerNorm(x + Sublayer(x))` (§3.1), fifteen times
    in a 3 + 3 layer model, so its cost adds up. This layer has the same
    arguments, weights (`gamma`, `beta`) and results as Keras' own, and
    still computes in float32 under every dtype policy. It runs
    `keras_transformer.backend.layer_norm`: on the TensorFlow backend, when
    normalizing over the last axis with both `scale` and `center`, that
    computes the statistics once and supplies the gradient in closed form,

        dx = (g - mean(g) - x_hat * mean(g * x_hat)) / sigma,  g = dy * gamma,

    which reads the activations a third as often as the automatic
    derivative of the forward formula. Every other case (other axes,
    `rms_scaling`, other backends, fast paths switched off) runs Keras'
    formula, `keras.ops.layer_normalization`, unchanged.
    """

    def call(self, inputs: Any) -> Any:
        outputs = backend.layer_norm(
            inputs,
            self.gamma,
            self.beta,
            self.axis,
            self.epsilon,
            rms_scaling=self.rms_scaling,
        )
        return ops.cast(outputs, self.compute_dtype)

    def _uses_fused_path(self, rank: int) -> bool:
        """Whether inputs of this rank take the TensorFlow fast path."""
        return backend.layer_norm_takes_fast_path(
            rank, self.axis, self.scale, self.center, self.rms_scaling
        )

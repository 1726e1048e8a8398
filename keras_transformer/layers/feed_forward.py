"""Position-wise feed-forward network, Eq. 4."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import keras
from keras import ops

from keras_transformer.backend import linear
from keras_transformer.layers.dropout import Dropout
from keras_transformer.validation import check_positive_int, check_rate


@keras.saving.register_keras_serializable(package="keras_transformer")
class FeedForward(keras.layers.Layer):
    """FFN(x) = max(0, x W_1 + b_1) W_2 + b_2, applied to each position (Eq. 4).

    Args:
        d_ff: inner size (paper: 2048).
        output_dim: output size; defaults to the input size (`d_model`).
        activation: the inner activation; the paper uses ReLU.
        dropout: dropout on the inner activations ("ReLU dropout" in the
            paper's reference implementation); 0 in the paper's text.
        use_bias: whether both linear layers have biases.
        kernel_initializer, bias_initializer: initializers of both layers.
        **kwargs: base layer arguments.

    Call arguments:
        inputs: `(batch, length, d_model)`.
        training: whether dropout is active.

    Example:
    >>> import numpy as np
    >>> ffn = FeedForward(d_ff=32)
    >>> tuple(ffn(np.zeros((2, 5, 8), "float32")).shape)
    (2, 5, 8)

    Reference: Vaswani et al. (2017), §3.3, Eq. 4.
    """

    def __init__(
        self,
        d_ff: int,
        output_dim: int | None = None,
        activation: str = "relu",
        dropout: float = 0.0,
        use_bias: bool = True,
        kernel_initializer: str | keras.initializers.Initializer = "glorot_uniform",
        bias_initializer: str | keras.initializers.Initializer = "zeros",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        check_positive_int("d_ff", d_ff)
        if output_dim is not None:
            check_positive_int("output_dim", output_dim)
        check_rate("dropout", dropout)
        self.d_ff = d_ff
        self.output_dim = output_dim
        self.activation = keras.activations.get(activation)
        self.dropout = dropout
        self.use_bias = use_bias
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.supports_masking = True

    def build(self, input_shape: Sequence[int | None]) -> None:
        if input_shape[-1] is None:
            raise ValueError(
                "The last dimension of the FeedForward inputs must be known. "
                f"Received: inputs.shape={tuple(input_shape)}"
            )
        output_dim = self.output_dim or int(input_shape[-1])
        dense_args = {
            "use_bias": self.use_bias,
            "kernel_initializer": self.kernel_initializer,
            "bias_initializer": self.bias_initializer,
            "dtype": self.dtype_policy,
        }
        # W_1, b_1 followed by the activation.
        self.inner_dense = keras.layers.Dense(
            self.d_ff, activation=self.activation, name="inner_dense", **dense_args
        )
        self.inner_dense.build(input_shape)
        self.inner_dropout = Dropout(
            self.dropout, dtype=self.dtype_policy, name="inner_dropout"
        )
        # W_2, b_2.
        self.output_dense = keras.layers.Dense(
            output_dim, name="output_dense", **dense_args
        )
        self.output_dense.build((*tuple(input_shape[:-1]), self.d_ff))
        self.built = True

    def call(self, inputs: Any, training: bool | None = None) -> Any:
        if self.inner_dense.quantization_mode or self.output_dense.quantization_mode:
            # Quantized kernels need Keras' own Dense computation.
            hidden = self.inner_dense(inputs)
            hidden = self.inner_dropout(hidden, training=training)
            return self.output_dense(hidden)
        # The same weights, multiplied by `linear` (fused bias and ReLU, and
        # gradient products laid out for speed on TensorFlow).
        relu = self.activation is keras.activations.relu
        hidden = linear(
            ops.cast(inputs, self.compute_dtype),
            self.inner_dense.kernel,
            self.inner_dense.bias,
            relu=relu,
        )
        if not relu:
            hidden = self.activation(hidden)
        hidden = self.inner_dropout(hidden, training=training)
        return linear(
            hidden,
            self.output_dense.kernel,
            self.output_dense.bias,
        )

    def compute_output_shape(
        self, input_shape: Sequence[int | None]
    ) -> tuple[int | None, ...]:
        return (*tuple(input_shape[:-1]), self.output_dim or input_shape[-1])

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(
            {
                "d_ff": self.d_ff,
                "output_dim": self.output_dim,
                "activation": keras.activations.serialize(self.activation),
                "dropout": self.dropout,
                "use_bias": self.use_bias,
                "kernel_initializer": keras.initializers.serialize(
                    self.kernel_initializer
                ),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            }
        )
        return config

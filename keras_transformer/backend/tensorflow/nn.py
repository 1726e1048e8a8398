"""TensorFlow twins of the layers' operations: linear maps, layer norm,
masked softmax, dropout, residual sum and the tied output projection.

See `docs/performance.md` for what each saves; `tests/backend/` holds each
to its portable reference in `keras_transformer.backend.portable`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import keras
import tensorflow as tf

from keras_transformer.backend.portable import (
    MASK_FILL_VALUE,
    flatten_tokens,
    reshape_target,
)
from keras_transformer.backend.tracing import forward_only_enabled

# Dropout compares 16 random bits per element with a threshold, so the drop
# probability is the requested rate rounded to a multiple of 2^-16.
RANDOM_BITS = 16
LEVELS = 2**RANDOM_BITS


def custom_gradient(forward: Callable[..., tuple[Any, Any]]) -> Callable[..., Any]:
    """`tf.custom_gradient(forward)`, or under `backend.forward_only()` the
    forward value alone (an export's graph holds no gradient to carry)."""
    with_gradient = tf.custom_gradient(forward)

    def call(*args: Any) -> Any:
        if forward_only_enabled():
            return forward(*args)[0]
        return with_gradient(*args)

    return call


# ----------------------------------------------------------------- linear maps
def linear(
    inputs: Any, kernel: Any, bias: Any | None = None, relu: bool = False
) -> Any:
    """`inputs @ kernel + bias` (and ReLU) as a 2-D `MatMul` + `BiasAdd` (Eqs. 2, 4).

    Every projection of the model (W^Q, W^K, W^V, W^O in Eq. 2, both layers
    of Eq. 4) acts on each position alike, so the positions are flattened
    into one `(tokens, d_in)` matrix. The forward product is a plain
    `MatMul` followed by `BiasAdd` (and `Relu`), which TensorFlow fuses into
    one kernel, and the gradient is written by hand: the input's gradient
    needs no reduction over broadcast axes, and each of the two gradient
    products takes the faster of two forms on oneDNN, TensorFlow's CPU
    kernels. With the `transpose_b` / `transpose_a` flags of `MatMul`, the
    products with a wide kernel's transpose (the 256 x 1024 inner kernel of
    the feed-forward network) and the kernel gradient of a tall kernel (its
    1024 x 256 outer kernel) run at about 75% of the speed of an `Einsum`,
    which transposes the operand itself. On a GPU both forms call the same
    cuBLAS product.
    """
    tokens, kernel, bias, leading_shape, d_out = flatten_tokens(inputs, kernel, bias)
    outputs = _linear_tokens(tokens, kernel, bias, relu)
    return keras.ops.reshape(outputs, (*leading_shape, d_out))


def _linear_tokens(tokens: Any, kernel: Any, bias: Any | None, relu: bool) -> Any:
    kernel = tf.convert_to_tensor(kernel)
    d_in, d_out = kernel.shape
    bias_args = () if bias is None else (tf.convert_to_tensor(bias),)

    @custom_gradient
    def product(tokens: Any, kernel: Any, *bias_args: Any) -> Any:
        outputs = tf.matmul(tokens, kernel)
        if bias_args:
            outputs = tf.nn.bias_add(outputs, bias_args[0])
        if relu:
            outputs = tf.nn.relu(outputs)

        def gradient(upstream: Any) -> tuple[Any, ...]:
            with tf.name_scope("linear_gradient"):
                if relu:
                    upstream = tf.raw_ops.ReluGrad(gradients=upstream, features=outputs)
                if d_out > d_in:
                    tokens_grad = tf.einsum("no,io->ni", upstream, kernel)
                else:
                    tokens_grad = tf.matmul(upstream, kernel, transpose_b=True)
                if d_in > d_out:
                    kernel_grad = tf.einsum("ni,no->io", tokens, upstream)
                else:
                    kernel_grad = tf.matmul(tokens, upstream, transpose_a=True)
                grads = (tokens_grad, kernel_grad)
                if bias_args:
                    grads += (tf.raw_ops.BiasAddGrad(out_backprop=upstream),)
                return grads

        return outputs, gradient

    return product(tokens, kernel, *bias_args)


def matmul_transposed(hidden: Any, embeddings: Any) -> Any:
    """`hidden @ embeddings^T` as one 2-D `MatMul` with `transpose_b` (§3.4).

    Its gradient with respect to the embedding matrix needs no transpose
    either.
    """
    embedding_dim = embeddings.shape[-1]
    flat = tf.reshape(hidden, [-1, embedding_dim])
    logits = tf.matmul(flat, embeddings, transpose_b=True)
    leading = reshape_target(hidden, len(hidden.shape) - 1)
    return tf.reshape(logits, [*leading, embeddings.shape[0]])


# ------------------------------------------------------- residual and norm
def residual_add(inputs: Any, sublayer_output: Any) -> Any:
    """`x + Sublayer(x)` (§3.1) as an `AddN`.

    `AddN`'s gradient hands the upstream gradient to both inputs as it is;
    `AddV2`'s gradient first reduces it over the broadcast axes, which
    copies it when the batch size is unknown.
    """
    return tf.math.add_n([inputs, sublayer_output])


def layer_norm(inputs: Any, gamma: Any, beta: Any, epsilon: float) -> Any:
    """Layer normalization over the last axis with a hand-written gradient.

    The statistics are computed once, in float32, and the gradient is
    supplied in closed form (Ba et al., 2016; §3.1),

        dx = (g - mean(g) - x_hat * mean(g * x_hat)) / sigma,  g = dy * gamma,

    which reads the activations a third as often as the automatic
    derivative of the forward formula. Returns float32.
    """
    if isinstance(gamma, keras.Variable):
        gamma = gamma.value
    if isinstance(beta, keras.Variable):
        beta = beta.value
    inputs = tf.cast(inputs, tf.float32)
    gamma = tf.cast(gamma, tf.float32)
    beta = tf.cast(beta, tf.float32)
    reduce_axes = list(range(len(inputs.shape) - 1))

    @custom_gradient
    def normalize(inputs: Any, gamma: Any, beta: Any) -> Any:
        mean = tf.reduce_mean(inputs, axis=-1, keepdims=True)
        centered = inputs - mean
        variance = tf.reduce_mean(tf.square(centered), axis=-1, keepdims=True)
        inverse_std = tf.math.rsqrt(variance + epsilon)
        normalized = centered * inverse_std

        def gradient(upstream: Any) -> tuple[Any, Any, Any]:
            with tf.name_scope("layer_norm_gradient"):
                return _gradient(upstream)

        def _gradient(upstream: Any) -> tuple[Any, Any, Any]:
            upstream = tf.cast(upstream, tf.float32)
            gamma_grad = tf.reduce_sum(upstream * normalized, axis=reduce_axes)
            beta_grad = tf.reduce_sum(upstream, axis=reduce_axes)
            scaled = upstream * gamma
            inputs_grad = (
                scaled
                - tf.reduce_mean(scaled, axis=-1, keepdims=True)
                - normalized
                * tf.reduce_mean(scaled * normalized, axis=-1, keepdims=True)
            ) * inverse_std
            return inputs_grad, gamma_grad, beta_grad

        return normalized * gamma + beta, gradient

    return normalize(inputs, gamma, beta)


# --------------------------------------------------------------- attention
def masked_softmax(logits: Any, mask: Any) -> Any:
    """The masked softmax of Eq. 1 with its gradient in closed form.

    The weights are already zero wherever the mask is false, so the usual
    softmax gradient `w * (g - sum(g * w))` is also the gradient of the
    masking, and the backward pass needs no select or multiply of its own.
    """
    mask = tf.convert_to_tensor(mask)
    allowed = tf.cast(mask, tf.float32)

    @custom_gradient
    def softmax(logits: Any) -> Any:
        weights = tf.nn.softmax(tf.where(mask, logits, MASK_FILL_VALUE)) * allowed

        def gradient(upstream: Any) -> Any:
            with tf.name_scope("masked_softmax_gradient"):
                upstream = tf.cast(upstream, tf.float32)
                return weights * (
                    upstream - tf.reduce_sum(upstream * weights, axis=-1, keepdims=True)
                )

        return weights, gradient

    return softmax(logits)


# ----------------------------------------------------------------- dropout
def dropout(inputs: Any, rate: float, seed: Any) -> Any:
    """Dropout (§5.4) from 16 random bits per element, `0 < rate < 1`.

    One 32-bit random number is drawn per two elements, and each 16-bit half
    is compared with `round(rate * 2^16)`. The drop probability is therefore
    the rate rounded to a multiple of 2^-16 (0.1 becomes 0.100006), and kept
    values are scaled by the inverse of the realised keep probability, so
    the expected output equals the input exactly. `seed` is a seed tensor
    (`keras.random.SeedGenerator.next()`).
    """
    inputs = tf.convert_to_tensor(inputs)
    # tf.random.stateless_* wants an int32 seed to run under XLA.
    if seed.dtype != tf.int32:
        seed = tf.cast(tf.math.floormod(seed, tf.int32.max - 1), tf.int32)
    threshold = min(round(rate * LEVELS), LEVELS - 1)
    scale = LEVELS / (LEVELS - threshold)
    size = tf.size(inputs)
    words = tf.random.stateless_uniform(
        [(size + 1) // 2], seed=seed, minval=None, maxval=None, dtype=tf.uint32
    )
    halves = tf.reshape(tf.bitcast(words, tf.uint16), [-1])
    if inputs.shape.num_elements() is None or inputs.shape.num_elements() % 2:
        halves = halves[:size]
    keep = tf.reshape(halves, tf.shape(inputs)) >= tf.constant(threshold, tf.uint16)
    # The mask with the scale folded in: one multiply forward and backward.
    keep_scale = tf.where(
        keep, tf.constant(scale, inputs.dtype), tf.constant(0, inputs.dtype)
    )

    @custom_gradient
    def apply_mask(inputs: Any) -> Any:
        def gradient(upstream: Any) -> Any:
            with tf.name_scope("dropout_gradient"):
                return upstream * keep_scale

        return inputs * keep_scale, gradient

    return apply_mask(inputs)

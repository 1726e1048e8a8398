"""The portable reference of every operation with a fast path: `keras.ops` only.

These are the package's own definitions of the operations that
`keras_transformer.backend` dispatches. They run on every Keras backend
(TensorFlow, JAX, PyTorch), they are what runs when the fast paths are
switched off, and the TensorFlow twins in `keras_transformer.backend.tensorflow`
are tested against them (`tests/backend/`). Nothing here imports TensorFlow.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import keras
from keras import ops

# The most negative float16 number: a fill value that is safe in every float
# dtype. Masked logits are replaced by it before the softmax, and the weights
# are multiplied by the mask afterwards, so masked keys get exactly zero weight
# and a fully masked row gets all-zero weights (never NaN).
MASK_FILL_VALUE = -65504.0


# ------------------------------------------------------------------- reshapes
def reshape_target(tensor: Any, count: int) -> tuple[Any, ...]:
    """The first `count` sizes of `tensor`, written as a reshape target.

    Sizes known when the graph is traced stay Python ints. When exactly one
    size is known only at run time (the batch of a decoding step, say), it
    becomes `-1`, so the target is a constant and a traced graph needs no
    `Shape` / `StridedSlice` / `Pack` ops to build it (three fewer ops per
    reshape, on every step of a cached search). With more than one unknown
    size, or a static size of 0 (where `-1` cannot be inferred), the sizes
    come from `ops.shape`.
    """
    sizes = tuple(tensor.shape[:count])
    unknown = [axis for axis, size in enumerate(sizes) if size is None]
    if len(unknown) == 1 and 0 not in sizes:
        return tuple(-1 if size is None else size for size in sizes)
    if not unknown:
        return sizes
    return tuple(ops.shape(tensor)[:count])


# ----------------------------------------------------------------- linear maps
def flatten_tokens(
    inputs: Any, kernel: Any, bias: Any | None
) -> tuple[Any, Any, Any | None, tuple[Any, ...], int]:
    """Casts `kernel` and `bias` to the dtype of `inputs` and flattens the
    positions of `inputs` into a `(tokens, d_in)` matrix.

    Returns `(tokens, kernel, bias, leading_shape, d_out)`; `linear` reshapes
    its `(tokens, d_out)` product back to `(*leading_shape, d_out)`.
    """
    kernel = ops.cast(kernel, inputs.dtype)
    if bias is not None:
        bias = ops.cast(bias, inputs.dtype)
    d_in, d_out = kernel.shape
    leading_shape = reshape_target(inputs, len(inputs.shape) - 1)
    tokens = ops.reshape(inputs, (-1, d_in))
    return tokens, kernel, bias, leading_shape, d_out


def linear(
    inputs: Any, kernel: Any, bias: Any | None = None, relu: bool = False
) -> Any:
    """`inputs @ kernel + bias`, optionally followed by ReLU (Eqs. 2 and 4).

    Args:
        inputs: `(..., d_in)`.
        kernel: `(d_in, d_out)`; cast to the dtype of `inputs`.
        bias: optional `(d_out,)`; cast likewise.
        relu: apply `max(0, .)` to the result (the inner layer of Eq. 4).

    Returns:
        `(..., d_out)`.
    """
    tokens, kernel, bias, leading_shape, d_out = flatten_tokens(inputs, kernel, bias)
    outputs = ops.matmul(tokens, kernel)
    if bias is not None:
        outputs = ops.add(outputs, bias)
    if relu:
        outputs = ops.relu(outputs)
    return ops.reshape(outputs, (*leading_shape, d_out))


def matmul_transposed(hidden: Any, embeddings: Any) -> Any:
    """`hidden @ embeddings^T` over the last axis of `hidden` (§3.4: the
    pre-softmax linear transformation shares the embedding matrix)."""
    return ops.matmul(hidden, ops.transpose(embeddings))


# ------------------------------------------------------- residual and norm
def residual_add(inputs: Any, sublayer_output: Any) -> Any:
    """`x + Sublayer(x)`, the residual connection of §3.1."""
    return inputs + sublayer_output


def layer_norm(
    inputs: Any,
    gamma: Any | None,
    beta: Any | None,
    axis: int | Sequence[int] = -1,
    epsilon: float = 1e-3,
    rms_scaling: bool = False,
) -> Any:
    """Layer normalization (Ba et al., 2016) as `keras.layers.LayerNormalization`
    computes it, statistics in at least float32 (§3.1, `LayerNorm(x + ...)`)."""
    return ops.layer_normalization(
        inputs, gamma, beta, axis, epsilon, rms_scaling=rms_scaling
    )


# --------------------------------------------------------------- attention
def masked_softmax(logits: Any, mask: Any) -> Any:
    """Softmax over the last axis with exact zeros where `mask` is false (Eq. 1).

    Args:
        logits: float32 `(..., key_length)`.
        mask: boolean, broadcastable to `logits`; `True` means "may attend".

    Returns:
        float32 weights; rows with no allowed key are all zeros.
    """
    weights = ops.softmax(ops.where(mask, logits, MASK_FILL_VALUE), axis=-1)
    return weights * ops.cast(mask, "float32")


# ----------------------------------------------------------------- dropout
def dropout(
    inputs: Any, rate: float, noise_shape: Any | None = None, seed: Any = None
) -> Any:
    """Keras' dropout (Srivastava et al., 2014; §5.4 "Residual Dropout"):
    `keras.random.dropout`, a float uniform number per element."""
    return keras.random.dropout(inputs, rate, noise_shape=noise_shape, seed=seed)


# -------------------------------------------------------------------- loss
def label_smoothed_nll(
    labels: Any, logits: Any, label_smoothing: float
) -> tuple[Any, Any]:
    """`((1 - eps) * NLL + eps * mean_v(-log p_v), NLL)` per token, float32 (§5.4).

    With z the logits, `-log p_y = logsumexp(z) - z_y` and
    `mean_v(-log p_v) = logsumexp(z) - mean_v(z)`; written this way the
    log-probabilities are never materialised.
    """
    logits = ops.cast(logits, "float32")
    log_normalizer = ops.logsumexp(logits, axis=-1)
    one_hot = ops.one_hot(ops.cast(labels, "int32"), logits.shape[-1], dtype="float32")
    nll = log_normalizer - ops.sum(logits * one_hot, axis=-1)
    if label_smoothing == 0:
        return nll, nll
    uniform = log_normalizer - ops.mean(logits, axis=-1)
    return (1.0 - label_smoothing) * nll + label_smoothing * uniform, nll


def global_token_count(local_count: Any) -> Any:
    """The token count of the whole batch: without replicas, the local count."""
    return local_count


# --------------------------------------------------------------- optimizer
def dense_gradient(gradient: Any, variable: Any) -> Any:
    """`gradient` as a dense tensor of `variable`'s shape.

    A sparse gradient (TensorFlow's `IndexedSlices`, as an embedding lookup
    gives: one row of values per lookup, with the row's index) becomes the
    dense gradient, the values of repeated rows summed. Any other gradient
    is returned as it is.
    """
    indices = getattr(gradient, "indices", None)
    if (
        indices is None
        or not hasattr(gradient, "values")
        or not hasattr(gradient, "dense_shape")
        or len(indices.shape) != 1  # a `SparseTensor`'s indices are 2-D
    ):
        return gradient
    return ops.segment_sum(gradient.values, indices, num_segments=variable.shape[0])


def adam_update(
    optimizer: Any, gradient: Any, variable: Any, learning_rate: Any
) -> None:
    """Keras' Adam update of one variable (Kingma & Ba, 2015; §5.3).

    A sparse gradient (an embedding's) is made dense first
    (`dense_gradient`), so a row looked up several times in a batch gets
    the square of its summed gradient in `v`, as Adam on the dense gradient
    does. Keras' own update, given the sparse gradient, squares each
    lookup's gradient and sums the squares.
    """
    gradient = dense_gradient(gradient, variable)
    keras.optimizers.Adam.update_step(optimizer, gradient, variable, learning_rate)

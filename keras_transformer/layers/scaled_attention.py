"""Scaled dot-product attention (Eq. 1) and the relative position
representations of Shaw et al. (2018), on tensors of projected heads.

Masks follow one convention throughout the package: a boolean tensor in which
`True` means "this query position may attend to this key position".
"""

from __future__ import annotations

import math
from typing import Any

import keras
from keras import ops

from keras_transformer.layers import masking

__all__ = [
    "relative_logits",
    "relative_outputs",
    "relative_position_index",
    "scaled_dot_product_attention",
]


def scaled_dot_product_attention(
    query: Any,
    key: Any,
    value: Any,
    mask: Any | None = None,
    *,
    dropout_rate: float = 0.0,
    training: bool | None = None,
    seed_generator: keras.random.SeedGenerator | None = None,
    scale: float | None = None,
    relative_keys: Any | None = None,
    relative_values: Any | None = None,
    relative_index: Any | None = None,
    key_value_groups: int = 1,
) -> tuple[Any, Any]:
    """Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V, Eq. 1 of the paper.

    With `relative_keys` (and `relative_values`), the relative position
    representations of Shaw et al. (2018): the logit of query `i` and key
    `j` is `q_i (k_j + a^K_ij)^T / sqrt(d_k)` (their Eq. 4) and the output
    `sum_j alpha_ij (v_j + a^V_ij)` (their Eq. 3), with `a_ij` the row
    `relative_index[i, j]` of the embeddings (see `relative_position_index`).

    The logits and the softmax are computed in float32 whatever the input
    dtype, so the function is safe under `mixed_float16`. Masked positions get
    exactly zero weight; a query row with no allowed key (a fully masked row)
    gets zero weights and therefore a zero output, never NaN.

    Args:
        query: tensor `(..., query_length, key_dim)`.
        key: tensor `(..., key_length, key_dim)`.
        value: tensor `(..., key_length, value_dim)`.
        mask: optional boolean tensor broadcastable to
            `(..., query_length, key_length)`; `True` means "may attend".
        dropout_rate: dropout on the attention weights (applied only when
            `training` is true).
        training: whether dropout is active.
        seed_generator: a `keras.random.SeedGenerator` for the dropout.
        scale: the factor applied to `Q K^T`; defaults to `1 / sqrt(key_dim)`.
        relative_keys: optional `(2k + 1, key_dim)` embeddings `a^K`, one
            per clipped distance, shared by every head.
        relative_values: optional `(2k + 1, value_dim)` embeddings `a^V`.
        relative_index: int `(query_length, key_length)`, the embedding row
            of each pair; needed with either set of embeddings.
        key_value_groups: grouped-query attention (Ainslie et al., 2023):
            axis 1 of `query` holds this many times the heads of `key` and
            `value` (`(batch, kv_heads, ...)`), key/value head `j` serving
            query heads `j * groups ... (j + 1) * groups - 1`.

    Returns:
        `(output, weights)`: output `(..., query_length, value_dim)` in the
        dtype of `query`, weights `(..., query_length, key_length)` in float32.

    Example:
    >>> import numpy as np
    >>> q = np.ones((1, 2, 4), "float32"); k = v = np.ones((1, 3, 4), "float32")
    >>> out, w = scaled_dot_product_attention(q, k, v)
    >>> tuple(out.shape), tuple(w.shape)
    ((1, 2, 4), (1, 2, 3))

    Reference: Vaswani et al. (2017), §3.2.1, Eq. 1; Shaw et al. (2018),
    Eqs. 3-4; Ainslie et al. (2023), "GQA".
    """
    masking.check_mask_dtypes(mask=mask)
    if key_value_groups > 1:
        key = ops.repeat(key, key_value_groups, axis=1)
        value = ops.repeat(value, key_value_groups, axis=1)
    if scale is None:
        scale = 1.0 / math.sqrt(query.shape[-1])
    compute_dtype = query.dtype
    query = ops.cast(query, "float32")
    # (..., query_length, key_length), accumulated in float32.
    logits = ops.matmul(query, ops.swapaxes(ops.cast(key, "float32"), -1, -2))
    if relative_keys is not None:
        logits = logits + relative_logits(query, relative_keys, relative_index)
    logits = logits * scale
    weights = masking.masked_softmax(logits, mask)
    if dropout_rate > 0.0 and training:
        weights = keras.random.dropout(weights, dropout_rate, seed=seed_generator)
    output = ops.matmul(ops.cast(weights, compute_dtype), value)
    if relative_values is not None:
        output = output + ops.cast(
            relative_outputs(weights, relative_values, relative_index), compute_dtype
        )
    return output, weights


def relative_position_index(
    query_positions: Any, key_positions: Any, max_distance: int
) -> Any:
    """`clip(j - i, -k, k) + k` for every query position `i` and key position `j`.

    The row of the relative embeddings `a^K_ij`, `a^V_ij` that a pair uses:
    Shaw et al. (2018), §3.2, "we consider a maximum relative position of
    k", `w_clip(j - i, k)`, the `2k + 1` embeddings indexed from 0.

    Args:
        query_positions: int `(query_length,)`.
        key_positions: int `(key_length,)`.
        max_distance: `k`.

    Returns:
        int32 `(query_length, key_length)` in `[0, 2k]`.

    Example:
    >>> import numpy as np
    >>> index = relative_position_index(np.arange(3), np.arange(3), 1)
    >>> np.asarray(index).tolist()
    [[1, 2, 2], [0, 1, 2], [0, 0, 1]]
    """
    query_positions = ops.cast(query_positions, "int32")
    key_positions = ops.cast(key_positions, "int32")
    # (query_length, key_length): j - i.
    distance = ops.expand_dims(key_positions, 0) - ops.expand_dims(query_positions, 1)
    return ops.clip(distance, -max_distance, max_distance) + max_distance


def relative_logits(query: Any, embeddings: Any, index: Any) -> Any:
    """`q_i . a^K_ij` for every pair: the second term of Shaw et al.'s
    (2018) Eq. 4, split off as in their Eq. 5.

    Args:
        query: `(..., query_length, key_dim)`.
        embeddings: `(2k + 1, key_dim)`, `a^K`.
        index: int `(query_length, key_length)` from `relative_position_index`.

    Returns:
        float32 `(..., query_length, key_length)`.
    """
    # (..., query_length, 2k + 1): each query against every distance.
    per_distance = ops.matmul(
        ops.cast(query, "float32"), ops.transpose(ops.cast(embeddings, "float32"))
    )
    # (query_length, 2k + 1, key_length): which distance each key lies at.
    one_hot = ops.swapaxes(_one_hot(index, embeddings.shape[0]), -1, -2)
    # (..., query_length, 1, 2k + 1) @ (query_length, 2k + 1, key_length)
    logits = ops.matmul(ops.expand_dims(per_distance, -2), one_hot)
    # (..., query_length, key_length)
    return ops.squeeze(logits, -2)


def relative_outputs(weights: Any, embeddings: Any, index: Any) -> Any:
    """`sum_j alpha_ij a^V_ij` for every query: the second term of Shaw et
    al.'s (2018) Eq. 3.

    Args:
        weights: the attention weights `(..., query_length, key_length)`.
        embeddings: `(2k + 1, value_dim)`, `a^V`.
        index: int `(query_length, key_length)` from `relative_position_index`.

    Returns:
        float32 `(..., query_length, value_dim)`.
    """
    # (..., query_length, 1, key_length) @ (query_length, key_length, 2k + 1):
    # the weight each query gives to every distance.
    per_distance = ops.matmul(
        ops.expand_dims(ops.cast(weights, "float32"), -2),
        _one_hot(index, embeddings.shape[0]),
    )
    # (..., query_length, 2k + 1) @ (2k + 1, value_dim)
    return ops.matmul(ops.squeeze(per_distance, -2), ops.cast(embeddings, "float32"))


def _one_hot(index: Any, depth: int) -> Any:
    """float32 `(query_length, key_length, depth)`."""
    return ops.one_hot(ops.cast(index, "int32"), depth, dtype="float32")

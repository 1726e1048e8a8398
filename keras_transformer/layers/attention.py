"""Scaled dot-product attention (Eq. 1) and multi-head attention (Eqs. 2-3),
optionally with relative position representations (Shaw et al., 2018).

Masks follow one convention throughout the package: a boolean tensor in which
`True` means "this query position may attend to this key position". Padding
masks of shape `(batch, length)` mark real tokens with `True`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import keras
from keras import ops

from keras_transformer.backend import linear
from keras_transformer.layers import masking
from keras_transformer.validation import (
    check_bool,
    check_positive_int,
    check_rate,
)


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
    Eqs. 3-4.
    """
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


class CachedCall(NamedTuple):
    """The arguments of `MultiHeadAttention.call` with a cache, as
    `_attend_cache` (the one cached path a subclass overrides) gets them."""

    value: Any | None
    key: Any | None
    masks: dict[str, Any]
    cache: tuple[Any, Any]
    cache_update_index: Any | None
    append_to_cache: bool
    beam_size: int


@keras.saving.register_keras_serializable(package="keras_transformer")
class MultiHeadAttention(keras.layers.Layer):
    """Multi-head attention, Eqs. 2-3 of the paper.

    `MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O` with
    `head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)`. All heads are computed in
    one batched tensor operation. With `key_dim = value_dim = d_model / h` the
    cost equals single-head attention with full dimensionality (§3.2.2).

    Args:
        num_heads: number of heads `h` (paper: 8).
        key_dim: size `d_k` of each head for queries and keys (paper: 64).
        value_dim: size `d_v` of each head for values; defaults to `key_dim`.
        output_dim: size of the output; defaults to the last dimension of the
            query.
        dropout: dropout rate on the attention weights.
        use_bias: whether the four projections have biases.
        kernel_initializer: initializer of the projection kernels.
        bias_initializer: initializer of the biases.
        relative_positions: `k`, the largest relative distance with its own
            learned embedding (Shaw et al., 2018): the logits get
            `q_i . a^K_ij`, one embedding per clipped distance
            `clip(j - i, -k, k)`, shared by the heads; `None` (the default,
            the paper's models) adds no variable. The positions are those of
            the query and key sequences, or of the cache rows in cached
            decoding; use it for self-attention.
        relative_values: also add `sum_j alpha_ij a^V_ij` to the output
            (Shaw et al., Eq. 3); needs `relative_positions`.
        **kwargs: base `keras.layers.Layer` arguments (`name`, `dtype`, ...).

    Call arguments:
        query: `(batch, query_length, query_dim)`.
        value: `(batch, key_length, value_input_dim)`.
        key: optional `(batch, key_length, key_input_dim)`; defaults to value.
        attention_mask: optional boolean `(batch, query_length, key_length)`
            (or `(query_length, key_length)`), `True` means "may attend".
        use_causal_mask: forbid attending to later positions (decoder
            self-attention, §3.2.3).
        return_attention_scores: also return the attention weights.
        training: whether attention dropout is active.
        query_mask, value_mask, key_mask: padding masks `(batch, length)`,
            filled in automatically by Keras from `mask_zero=True` embeddings.

    Returns:
        the output `(batch, query_length, output_dim)`, or
        `(output, scores)` with scores `(batch, num_heads, query_length,
        key_length)` when `return_attention_scores=True`.

    Example:
    >>> import numpy as np
    >>> layer = MultiHeadAttention(num_heads=2, key_dim=4)
    >>> x = np.random.rand(3, 5, 8).astype("float32")
    >>> out, scores = layer(x, x, return_attention_scores=True)
    >>> tuple(out.shape), tuple(scores.shape)
    ((3, 5, 8), (3, 2, 5, 5))

    Reference: Vaswani et al. (2017), §3.2.2, Eqs. 2-3; Shaw et al. (2018),
    "Self-Attention with Relative Position Representations", Eqs. 3-5.
    """

    def __init__(
        self,
        num_heads: int,
        key_dim: int,
        value_dim: int | None = None,
        output_dim: int | None = None,
        dropout: float = 0.0,
        use_bias: bool = True,
        kernel_initializer: str | keras.initializers.Initializer = "glorot_uniform",
        bias_initializer: str | keras.initializers.Initializer = "zeros",
        relative_positions: int | None = None,
        relative_values: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        check_relative_positions(relative_positions, relative_values)
        check_positive_int("num_heads", num_heads)
        check_positive_int("key_dim", key_dim)
        if value_dim is not None:
            check_positive_int("value_dim", value_dim)
        if output_dim is not None:
            check_positive_int("output_dim", output_dim)
        check_rate("dropout", dropout)
        self.num_heads = num_heads
        self.key_dim = key_dim
        self.value_dim = value_dim if value_dim is not None else key_dim
        self.output_dim = output_dim
        self.dropout = dropout
        self.use_bias = use_bias
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.relative_positions = relative_positions
        self.relative_values = relative_values
        self.supports_masking = True
        self.seed_generator = keras.random.SeedGenerator(0) if dropout > 0 else None

    # ------------------------------------------------------------------ build
    def build(
        self,
        query_shape: Sequence[int | None],
        value_shape: Sequence[int | None] | None = None,
        key_shape: Sequence[int | None] | None = None,
    ) -> None:
        value_shape = query_shape if value_shape is None else value_shape
        key_shape = value_shape if key_shape is None else key_shape
        query_dim = _last_dim("query", query_shape)
        value_input_dim = _last_dim("value", value_shape)
        key_input_dim = _last_dim("key", key_shape)
        output_dim = self.output_dim or query_dim
        heads, d_k, d_v = self.num_heads, self.key_dim, self.value_dim
        self.query_kernel = self._kernel("query_kernel", (query_dim, heads * d_k))
        self.key_kernel = self._kernel("key_kernel", (key_input_dim, heads * d_k))
        self.value_kernel = self._kernel("value_kernel", (value_input_dim, heads * d_v))
        # W^O in Eq. 2: (h * d_v, output_dim).
        self.output_kernel = self._kernel("output_kernel", (heads * d_v, output_dim))
        if self.use_bias:
            self.query_bias = self._bias("query_bias", heads * d_k)
            self.key_bias = self._bias("key_bias", heads * d_k)
            self.value_bias = self._bias("value_bias", heads * d_v)
            self.output_bias = self._bias("output_bias", output_dim)
        else:
            self.query_bias = self.key_bias = None
            self.value_bias = self.output_bias = None
        # Shaw et al. (2018): a^K (and a^V), one row per clipped distance
        # -k..k, shared by the heads; created only when asked for, so the
        # variables of other models keep their names.
        self.relative_key_embeddings = self.relative_value_embeddings = None
        if self.relative_positions is not None:
            distances = 2 * self.relative_positions + 1
            self.relative_key_embeddings = self._kernel(
                "relative_key_embeddings", (distances, d_k)
            )
            if self.relative_values:
                self.relative_value_embeddings = self._kernel(
                    "relative_value_embeddings", (distances, d_v)
                )
        self._output_dim = output_dim
        self.built = True

    def _kernel(self, name: str, shape: tuple[int, int]) -> keras.Variable:
        return self.add_weight(
            name=name, shape=shape, initializer=self.kernel_initializer
        )

    def _bias(self, name: str, size: int) -> keras.Variable:
        return self.add_weight(
            name=name, shape=(size,), initializer=self.bias_initializer
        )

    # ------------------------------------------------------------ projections
    def _project(
        self, inputs: Any, kernel: Any, bias: Any, head_dim: int, scale: float = 1.0
    ) -> Any:
        """Linear projection split into heads: (batch, heads, length, head_dim).

        A `scale` is applied to whichever is smaller: the projected tokens
        of a single decoding step, or otherwise the kernel and bias.
        """
        one_step = inputs.shape[1] == 1
        if not one_step:
            kernel, bias = _scaled(kernel, scale), _scaled(bias, scale)
        outputs = linear(inputs, kernel, bias)
        if one_step:
            outputs = _scaled(outputs, scale)
        batch, length = ops.shape(inputs)[0], ops.shape(inputs)[1]
        # (batch, length, heads, head_dim)
        outputs = ops.reshape(outputs, (batch, length, self.num_heads, head_dim))
        # (batch, heads, length, head_dim)
        return ops.transpose(outputs, (0, 2, 1, 3))

    @property
    def query_scale(self) -> float:
        """`1 / sqrt(d_k)`, the scaling of Eq. 1, applied by the query projection."""
        return 1.0 / math.sqrt(self.key_dim)

    def project_query(self, query: Any) -> Any:
        """Q W^Q / sqrt(d_k) split into heads: `(batch, heads, query_length, key_dim)`.

        The `1 / sqrt(d_k)` of Eq. 1 is folded into the projection (it scales
        the `d_model x d_k` kernel rather than every attention logit), so
        `attend` does not scale again.
        """
        return self._project(
            ops.cast(query, self.compute_dtype),
            self.query_kernel,
            self.query_bias,
            self.key_dim,
            scale=self.query_scale,
        )

    def project_key_value(self, value: Any, key: Any | None = None) -> tuple[Any, Any]:
        """K W^K and V W^V split into heads.

        Used for incremental decoding: encoder-decoder attention computes its
        keys and values once per source sentence (a fixed cross-attention
        cache), and decoder self-attention appends one position per step.

        Returns:
            `(keys, values)` of shapes `(batch, heads, key_length, key_dim)`
            and `(batch, heads, key_length, value_dim)`.
        """
        value = ops.cast(value, self.compute_dtype)
        if key is None and self.value_dim == self.key_dim:
            # Keys and values of the same sequence: one product, one transpose.
            bias = None
            if self.key_bias is not None:
                bias = ops.concatenate([self.key_bias, self.value_bias])
            outputs = linear(
                value,
                ops.concatenate([self.key_kernel, self.value_kernel], axis=1),
                bias,
            )
            return self._stacked_heads(outputs, 2)
        key = value if key is None else ops.cast(key, self.compute_dtype)
        keys = self._project(key, self.key_kernel, self.key_bias, self.key_dim)
        values = self._project(
            value, self.value_kernel, self.value_bias, self.value_dim
        )
        return keys, values

    def project_self_attention(self, inputs: Any) -> tuple[Any, Any, Any]:
        """Q W^Q / sqrt(d_k), K W^K and V W^V of one sequence in one product.

        Self-attention projects the same inputs three times; concatenating
        the three kernels makes that one larger (and faster) product. The
        queries are scaled as by `project_query`.

        Returns:
            `(queries, keys, values)`, each `(batch, heads, length, dim)`.
        """
        inputs = ops.cast(inputs, self.compute_dtype)
        kernels = [
            _scaled(self.query_kernel, self.query_scale),
            self.key_kernel,
            self.value_kernel,
        ]
        # (d_in, heads * (2 * key_dim + value_dim))
        kernel = ops.concatenate(kernels, axis=1)
        bias = None
        if self.query_bias is not None:
            bias = ops.concatenate(
                [
                    _scaled(self.query_bias, self.query_scale),
                    self.key_bias,
                    self.value_bias,
                ]
            )
        outputs = linear(inputs, kernel, bias)
        if self.value_dim == self.key_dim:
            return self._stacked_heads(outputs, 3)
        batch, length = ops.shape(inputs)[0], ops.shape(inputs)[1]
        key_size = self.num_heads * self.key_dim
        projections = ops.split(outputs, [key_size, 2 * key_size], axis=-1)
        head_dims = (self.key_dim, self.key_dim, self.value_dim)
        return tuple(
            # (batch, length, heads, dim) -> (batch, heads, length, dim)
            ops.transpose(
                ops.reshape(projection, (batch, length, self.num_heads, head_dim)),
                (0, 2, 1, 3),
            )
            for projection, head_dim in zip(projections, head_dims, strict=True)
        )

    def _stacked_heads(self, outputs: Any, count: int) -> tuple[Any, ...]:
        """Splits `count` concatenated projections into heads, each
        `(batch, heads, length, key_dim)`.

        One transpose for all of them, (batch, length, count, heads, dim) ->
        (count, batch, heads, length, dim), then slices along the first axis
        (which TensorFlow takes without copying).
        """
        batch, length = ops.shape(outputs)[0], ops.shape(outputs)[1]
        outputs = ops.reshape(
            outputs, (batch, length, count, self.num_heads, self.key_dim)
        )
        return tuple(ops.unstack(ops.transpose(outputs, (2, 0, 3, 1, 4)), count))

    def combine_heads(self, heads_output: Any) -> Any:
        """Concat(head_1, ..., head_h) W^O of Eq. 2.

        Args:
            heads_output: `(batch, heads, query_length, value_dim)`.

        Returns:
            `(batch, query_length, output_dim)`.
        """
        batch, length = ops.shape(heads_output)[0], ops.shape(heads_output)[2]
        # (batch, query_length, heads, value_dim)
        outputs = ops.transpose(heads_output, (0, 2, 1, 3))
        # (batch, query_length, heads * value_dim)
        outputs = ops.reshape(outputs, (batch, length, self.num_heads * self.value_dim))
        return linear(outputs, self.output_kernel, self.output_bias)

    def attend(
        self,
        query_heads: Any,
        keys: Any,
        values: Any,
        mask: Any | None = None,
        training: bool | None = None,
        positions: tuple[Any, Any] | None = None,
    ) -> tuple[Any, Any]:
        """Eq. 1 on projected heads, then W^O.

        Args:
            query_heads: `(batch, heads, query_length, key_dim)` from
                `project_query` (already scaled by `1 / sqrt(d_k)`).
            keys, values: from `project_key_value` (or a decoding cache).
            mask: boolean, broadcastable to `(batch, heads, query_length,
                key_length)`; `True` means "may attend".
            training: whether attention dropout is active.
            positions: `(query_positions, key_positions)`, int `(query_length,)`
                and `(key_length,)`: where the queries and keys sit, for
                `relative_positions` (which needs them); ignored otherwise.

        Returns:
            `(output, scores)`: `(batch, query_length, output_dim)` and
            `(batch, heads, query_length, key_length)` float32 weights.
        """
        heads_output, scores = scaled_dot_product_attention(
            query_heads,
            keys,
            values,
            mask,
            dropout_rate=self.dropout,
            training=training,
            seed_generator=self.seed_generator,
            scale=1.0,  # project_query has scaled the queries
            **self.relative_arguments(positions),
        )
        return self.combine_heads(heads_output), scores

    def relative_arguments(self, positions: tuple[Any, Any] | None) -> dict[str, Any]:
        """The relative-position arguments of `scaled_dot_product_attention`
        for `(query_positions, key_positions)`: `{}` without
        `relative_positions`."""
        if self.relative_positions is None:
            return {}
        if positions is None:
            raise ValueError(
                f"{type(self).__name__}(relative_positions="
                f"{self.relative_positions}) needs the positions of its queries "
                "and keys: call it on whole sequences or with a cache and "
                "cache_update_index (not on a fixed cache, nor attend() alone)."
            )
        return {
            "relative_keys": self.relative_key_embeddings,
            "relative_values": self.relative_value_embeddings,
            "relative_index": relative_position_index(
                *positions, self.relative_positions
            ),
        }

    # ------------------------------------------------------ cached decoding
    def empty_cache(
        self, batch_size: Any, max_length: int, beam_size: int | None = None
    ) -> tuple[Any, Any]:
        """A zero self-attention cache, for `call(..., cache=...)`.

        Args:
            batch_size: number of sequences (examples).
            max_length: number of positions the cache holds; 0 for a cache
                that `call(..., append_to_cache=True)` grows.
            beam_size: the number of hypotheses per position (beam search);
                `None` or 1 for one.

        Returns:
            `(keys, values)` of shapes `(batch, heads, max_length * beam,
            key_dim)` and `(batch, heads, max_length * beam, value_dim)`: the
            one cache layout of the package, in which slot `j` of position
            `t` is row `t * beam + j` (with one hypothesis, row `t` is
            position `t`). It is the layout attention reads, so writing a
            step needs no reshape of the cache (under XLA, a reshape of the
            updated cache made it copy the whole cache at every step). The
            size is fixed, so a decoding loop keeps static shapes (XLA).
        """
        slots = max_length if beam_size is None else max_length * beam_size
        shape = (batch_size, self.num_heads, slots)
        return (
            ops.zeros((*shape, self.key_dim), self.compute_dtype),
            ops.zeros((*shape, self.value_dim), self.compute_dtype),
        )

    @property
    def cache_window(self) -> int | None:
        """How far back a cached query may attend (`None`: to every position)."""
        return None

    def _attend_cache(
        self, query: Any, call: CachedCall
    ) -> tuple[Any, Any, tuple[Any, Any]]:
        """`call` with a cache: write this call's keys and values, then attend.

        With `cache_update_index=None` the cache is read as it is (the
        encoder-decoder keys and values, computed once). Otherwise the keys
        and values of `value` (of `query` when `value` is None) go to rows
        `cache_update_index * beam_size ...`, or are appended to a cache that
        holds exactly the rows before them; the queries then attend over
        every row of the cache, under `_cache_mask`.

        Returns:
            `(output, scores, cache)`.
        """
        keys, values = call.cache
        beam_size = call.beam_size
        index = None
        if call.cache_update_index is not None:
            index = ops.cast(call.cache_update_index, "int32")
            step_keys, step_values = self.project_key_value(
                query if call.value is None else call.value, call.key
            )
            keys, values = _write_rows(
                (keys, values),
                (step_keys, step_values),
                None if call.append_to_cache else _row(index, beam_size),
            )
        query_length, cache_length = ops.shape(query)[1], ops.shape(keys)[2]
        mask = self._cache_mask(
            query_length, cache_length, index, beam_size, call.masks
        )
        positions = None
        if index is not None:
            positions = _cached_positions(query_length, cache_length, index, beam_size)
        output, scores = self.attend(
            self.project_query(query),
            keys,
            values,
            mask,
            training=False,
            positions=positions,
        )
        return output, scores, (keys, values)

    def _attend_cached_slots(
        self,
        query: Any,
        cache: tuple[Any, Any],
        index: Any,
        slots: Any,
        allowed: Any,
        positions: tuple[Any, Any] | None = None,
    ) -> tuple[Any, Any, tuple[Any, Any]]:
        """One position's cached self-attention over a few rows of the cache
        (the memory of the local layers): the position's keys and values are
        written at row `index`, then its query attends to rows `slots`
        (`(W,)`) where `allowed` (`(W,)`) holds, at a cost of `O(W)`.

        Returns:
            `(output, scores, cache)`.
        """
        keys, values = cache
        queries, step_keys, step_values = self.project_self_attention(query)
        keys = ops.slice_update(keys, (0, 0, index, 0), step_keys)
        values = ops.slice_update(values, (0, 0, index, 0), step_values)
        # (batch, heads, W, dim)
        output, scores = self.attend(
            queries,
            ops.take(keys, slots, axis=2),
            ops.take(values, slots, axis=2),
            allowed[None, None, None],
            False,
            positions=positions,
        )
        return output, scores, (keys, values)

    def _cache_mask(
        self,
        query_length: Any,
        cache_length: Any,
        index: Any | None,
        beam_size: int,
        masks: dict[str, Any],
    ) -> Any | None:
        """The mask of cached attention, `(batch or 1, 1, query_length, rows)`.

        The caller's masks (`attention_mask` over the cache rows, e.g. each
        hypothesis' history in a beam search, and the padding masks), and,
        with `use_causal_mask` or a `cache_window`, the positions: query `i`
        sits at position `index + i // beam_size`, row `r` holds position
        `r // beam_size`, and a query sees the positions up to its own (and
        no farther back than the window).
        """
        mask = masking.merge_attention_masks(
            query_length,
            cache_length,
            query_mask=masks["query_mask"],
            key_mask=masks["key_mask"],
            attention_mask=masks["attention_mask"],
        )
        causal = masks["use_causal_mask"] and index is not None
        window = self.cache_window if index is not None else None
        if causal or window is not None:
            positions = masking.cached_positions_mask(
                query_length, cache_length, index, beam_size, causal, window
            )
            mask = positions if mask is None else ops.logical_and(mask, positions)
        if mask is not None:
            # (batch or 1, 1, query_length, rows): one mask for every head.
            mask = ops.expand_dims(mask, axis=-3)
        return mask

    # ------------------------------------------------------------------- call
    def call(
        self,
        query: Any,
        value: Any | None = None,
        key: Any | None = None,
        attention_mask: Any | None = None,
        use_causal_mask: bool = False,
        return_attention_scores: bool = False,
        training: bool | None = None,
        query_mask: Any | None = None,
        value_mask: Any | None = None,
        key_mask: Any | None = None,
        cache: tuple[Any, Any] | None = None,
        cache_update_index: Any | None = None,
        append_to_cache: bool = False,
        beam_size: int = 1,
    ) -> Any:
        masks = {
            "query_mask": query_mask,
            "key_mask": key_mask if key_mask is not None else value_mask,
            "attention_mask": attention_mask,
            "use_causal_mask": use_causal_mask,
        }
        if cache is None:
            _check_no_cache_arguments(cache_update_index, append_to_cache, beam_size)
            if value is None and key is None:
                # Self-attention: the three projections in one product.
                projected = self.project_self_attention(query)
            else:
                projected = (
                    self.project_query(query),
                    *self.project_key_value(query if value is None else value, key),
                )
            output, scores = self._attend_projected(*projected, masks, training)
            return (output, scores) if return_attention_scores else output
        check_positive_int("beam_size", beam_size)
        output, scores, cache = self._attend_cache(
            query,
            CachedCall(
                value,
                key,
                masks,
                cache,
                cache_update_index,
                append_to_cache,
                beam_size,
            ),
        )
        if return_attention_scores:
            return output, scores, cache
        return output, cache

    def _attend_projected(
        self,
        queries: Any,
        keys: Any,
        values: Any,
        masks: dict[str, Any],
        training: bool | None,
    ) -> tuple[Any, Any]:
        """Eq. 1 over projected heads under the merged masks: `(output, scores)`."""
        mask = masking.merge_attention_masks(
            query_length=ops.shape(queries)[2],
            key_length=ops.shape(keys)[2],
            **masks,
        )
        if mask is not None:
            # (batch, 1, query_length, key_length): one mask for every head.
            mask = ops.expand_dims(mask, axis=-3)
        positions = (
            ops.arange(ops.shape(queries)[2], dtype="int32"),
            ops.arange(ops.shape(keys)[2], dtype="int32"),
        )
        return self.attend(
            queries, keys, values, mask, training=training, positions=positions
        )

    def compute_output_shape(
        self,
        query_shape: Sequence[int | None],
        value_shape: Sequence[int | None] | None = None,
        key_shape: Sequence[int | None] | None = None,
    ) -> tuple[int | None, ...]:
        output_dim = self.output_dim or query_shape[-1]
        return (*tuple(query_shape[:-1]), output_dim)

    def compute_output_spec(
        self,
        query: Any,
        value: Any | None = None,
        key: Any | None = None,
        **kwargs: Any,
    ) -> Any:
        """Shapes of `call`'s results (the call arguments as keywords)."""
        value = query if value is None else value
        output_shape = self.compute_output_shape(query.shape, value.shape)
        results = [keras.KerasTensor(output_shape, dtype=self.compute_dtype)]
        cache = kwargs.get("cache")
        if kwargs.get("return_attention_scores"):
            # The key length comes from the value (cross-attention included),
            # or from the cache.
            key_length = value.shape[1] if cache is None else cache[0].shape[2]
            scores_shape = (query.shape[0], self.num_heads, query.shape[1], key_length)
            results.append(keras.KerasTensor(scores_shape, dtype="float32"))
        if cache is not None:
            results.append(tuple(keras.KerasTensor(c.shape, c.dtype) for c in cache))
        return results[0] if len(results) == 1 else tuple(results)

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "key_dim": self.key_dim,
                "value_dim": self.value_dim,
                "output_dim": self.output_dim,
                "dropout": self.dropout,
                "use_bias": self.use_bias,
                "kernel_initializer": keras.initializers.serialize(
                    self.kernel_initializer
                ),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
                "relative_positions": self.relative_positions,
                "relative_values": self.relative_values,
            }
        )
        return config


def check_relative_positions(
    relative_positions: Any, relative_values: Any, prefix: str = ""
) -> None:
    """Raises a one-line `ValueError` for bad relative-position settings.

    `relative_positions` is `k`, a positive integer, or `None` (off);
    `relative_values` a bool that needs `relative_positions`. `prefix`
    names a config section (``"model."``).
    """
    check_positive_int(
        f"{prefix}relative_positions", relative_positions, allow_none=True
    )
    check_bool(f"{prefix}relative_values", relative_values)
    if relative_values and relative_positions is None:
        raise ValueError(
            f"`{prefix}relative_values=True` needs `{prefix}relative_positions` "
            "(the clipping distance k, e.g. 16). Received: "
            f"{prefix}relative_positions=None"
        )


def _last_dim(name: str, shape: Sequence[int | None]) -> int:
    if len(shape) != 3:
        raise ValueError(
            f"MultiHeadAttention expects `{name}` of rank 3 "
            f"(batch, length, features). Received: {name}.shape={tuple(shape)}"
        )
    if shape[-1] is None:
        raise ValueError(
            f"The last dimension of `{name}` must be known. "
            f"Received: {name}.shape={tuple(shape)}"
        )
    return int(shape[-1])


def _check_no_cache_arguments(
    cache_update_index: Any | None, append_to_cache: bool, beam_size: int
) -> None:
    """Raises `ValueError` for cache arguments given without a cache."""
    if cache_update_index is not None or append_to_cache or beam_size != 1:
        raise ValueError(
            "cache_update_index, append_to_cache and beam_size need a cache: "
            "pass cache=layer.empty_cache(batch, max_length, beam_size). Received: "
            f"cache=None, cache_update_index={cache_update_index!r}, "
            f"append_to_cache={append_to_cache!r}, beam_size={beam_size!r}"
        )


def _cached_positions(
    query_length: Any, cache_length: Any, index: Any, beam_size: int
) -> tuple[Any, Any]:
    """`(query_positions, row_positions)` of a cached call, int32: query `i`
    sits at position `index + i // beam_size`, row `r` holds position
    `r // beam_size` (the layout of `empty_cache`)."""
    queries = ops.arange(query_length, dtype="int32") // beam_size
    rows = ops.arange(cache_length, dtype="int32") // beam_size
    return queries + ops.cast(index, "int32"), rows


def check_one_position_cache(layer: str, query: Any, call: CachedCall) -> None:
    """Raises the one-line `ValueError` of a local layer that samples with a
    cache one position at a time, unless `query` is one position with a
    `cache_update_index` and nothing else (no separate keys/values, masks,
    appending or beam)."""
    given = [call.value, call.key, *(call.masks[n] for n in _CACHED_STEP_REFUSES)]
    one_position = query.shape[1] == 1 and call.cache_update_index is not None
    if (
        not one_position
        or call.append_to_cache
        or call.beam_size != 1
        or any(item is not None for item in given)
    ):
        raise ValueError(
            f"{layer} with a cache samples one position at a time: pass query "
            "(batch, 1, features), cache and cache_update_index only. Received: "
            f"query.shape={tuple(query.shape)}, "
            f"cache_update_index={call.cache_update_index!r}"
        )


#: The masks a one-position cached step of a local layer refuses.
_CACHED_STEP_REFUSES = ("query_mask", "key_mask", "attention_mask")


def _row(index: Any, beam_size: int) -> Any:
    """The first cache row of position `index`: `index * beam_size`."""
    return index if beam_size == 1 else index * beam_size


def _write_rows(
    cache: tuple[Any, Any], step: tuple[Any, Any], row: Any | None
) -> tuple[Any, Any]:
    """Writes the step's `(keys, values)` into the cache at `row`, or appends
    them (`row=None`: the cache holds exactly the rows before them)."""
    if row is None:
        return tuple(
            ops.concatenate([old, new], axis=2)
            for old, new in zip(cache, step, strict=True)
        )
    start = (0, 0, row, 0)
    return tuple(
        ops.slice_update(old, start, new) for old, new in zip(cache, step, strict=True)
    )


def _scaled(weight: Any, scale: float) -> Any:
    """`weight * scale` (None stays None; a scale of 1 leaves it untouched)."""
    if weight is None or scale == 1.0:
        return weight
    return ops.multiply(weight, scale)

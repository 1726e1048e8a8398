"""Scaled dot-product attention (Eq. 1) and multi-head attention (Eqs. 2-3).

Masks follow one convention throughout the package: a boolean tensor in which
`True` means "this query position may attend to this key position". Padding
masks of shape `(batch, length)` mark real tokens with `True`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import keras
from keras import ops

from keras_transformer.backend import linear
from keras_transformer.layers import masking
from keras_transformer.validation import check_positive_int, check_rate


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
) -> tuple[Any, Any]:
    """Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V, Eq. 1 of the paper.

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

    Returns:
        `(output, weights)`: output `(..., query_length, value_dim)` in the
        dtype of `query`, weights `(..., query_length, key_length)` in float32.

    Example:
    >>> import numpy as np
    >>> q = np.ones((1, 2, 4), "float32"); k = v = np.ones((1, 3, 4), "float32")
    >>> out, w = scaled_dot_product_attention(q, k, v)
    >>> tuple(out.shape), tuple(w.shape)
    ((1, 2, 4), (1, 2, 3))

    Reference: Vaswani et al. (2017), §3.2.1, Eq. 1.
    """
    if scale is None:
        scale = 1.0 / math.sqrt(query.shape[-1])
    compute_dtype = query.dtype
    # (..., query_length, key_length), accumulated in float32.
    logits = ops.matmul(
        ops.cast(query, "float32"),
        ops.swapaxes(ops.cast(key, "float32"), -1, -2),
    )
    logits = logits * scale
    weights = masking.masked_softmax(logits, mask)
    if dropout_rate > 0.0 and training:
        weights = keras.random.dropout(weights, dropout_rate, seed=seed_generator)
    output = ops.matmul(ops.cast(weights, compute_dtype), value)
    return output, weights


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

    Reference: Vaswani et al. (2017), §3.2.2, Eqs. 2-3.
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
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
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
    ) -> tuple[Any, Any]:
        """Eq. 1 on projected heads, then W^O.

        Args:
            query_heads: `(batch, heads, query_length, key_dim)` from
                `project_query` (already scaled by `1 / sqrt(d_k)`).
            keys, values: from `project_key_value` (or a decoding cache).
            mask: boolean, broadcastable to `(batch, heads, query_length,
                key_length)`; `True` means "may attend".
            training: whether attention dropout is active.

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
        )
        return self.combine_heads(heads_output), scores

    # ------------------------------------------------------ cached decoding
    def empty_cache(
        self, batch_size: Any, max_length: int, beam_size: int | None = None
    ) -> tuple[Any, Any]:
        """A zero self-attention cache for incremental decoding.

        Args:
            batch_size: number of sequences (examples).
            max_length: number of positions the cache holds; 0 for a cache
                that `cached_beam_self_attention(..., append=True)` grows.
            beam_size: with a number, one slot per hypothesis at every
                position (for `cached_beam_self_attention`).

        Returns:
            `(keys, values)` of shapes `(batch, heads, max_length, key_dim)` and
            `(batch, heads, max_length, value_dim)`, or with `beam_size`
            `(batch, heads, max_length * beam_size, key_dim)` and the same for
            the values: slot `j` of position `t` is row `t * beam_size + j`,
            the layout attention reads, so that writing a step needs no
            reshape of the cache (under XLA, a reshape of the updated cache
            made it copy the whole cache at every step). The size is fixed,
            so a decoding loop keeps static shapes (XLA).
        """
        slots = max_length if beam_size is None else max_length * beam_size
        shape = (batch_size, self.num_heads, slots)
        return (
            ops.zeros((*shape, self.key_dim), self.compute_dtype),
            ops.zeros((*shape, self.value_dim), self.compute_dtype),
        )

    def cached_self_attention(
        self,
        query_step: Any,
        cache: tuple[Any, Any],
        cache_index: Any,
        window: int | None = None,
    ) -> tuple[Any, Any, tuple[Any, Any]]:
        """Causal self-attention of the positions `cache_index ...` only.

        The keys and values of the step are written into the cache at
        `cache_index`; query `i` attends to the cached positions
        `0 .. cache_index + i` (the last `window + 1` of them with a window),
        and the unused slots are masked out.

        Args:
            query_step: `(batch, step_length, query_dim)`.
            cache: `(keys, values)` from `empty_cache` or the previous step.
            cache_index: integer scalar (may be a tensor), the position of the
                first query.
            window: restrict attention to this distance (§4).

        Returns:
            `(output, scores, cache)`: `(batch, step_length, output_dim)`,
            `(batch, heads, step_length, max_length)` and the updated cache.
        """
        keys, values = self.project_key_value(query_step)
        index = ops.cast(cache_index, "int32")
        start = (0, 0, index, 0)
        cache = (
            ops.slice_update(cache[0], start, keys),
            ops.slice_update(cache[1], start, values),
        )
        mask = masking.causal_mask(
            ops.shape(query_step)[1],
            ops.shape(cache[0])[2],
            query_offset=index,
            window=window,
        )
        # (1, 1, step_length, max_length)
        mask = mask[None, None]
        output, scores = self.attend(
            self.project_query(query_step), cache[0], cache[1], mask, training=False
        )
        return output, scores, cache

    def cached_beam_self_attention(
        self,
        hypotheses: Any,
        cache: tuple[Any, Any],
        cache_index: Any,
        beam_mask: Any,
        window: int | None = None,
        append: bool = False,
    ) -> tuple[Any, Any, tuple[Any, Any]]:
        """Causal self-attention of one position of several hypotheses per
        sequence (beam search), over caches that are never reordered.

        Hypothesis `k` writes its keys and values of position `cache_index`
        into slot `k` of that position; the slots of earlier positions hold
        what the hypotheses of those steps computed. Which slot of position
        `t` belongs to the history of hypothesis `k` is given by
        `beam_mask`, so a search that reorders its hypotheses moves that
        small mask, not the caches. One matrix product per head scores the
        `beam` queries of a sequence against every slot; the slots outside a
        hypothesis' history get exactly zero weight (Eq. 1 with a mask).

        Args:
            hypotheses: `(batch, beam, query_dim)`: the inputs of the `beam`
                hypotheses of each sequence, all at position `cache_index`.
            cache: `(keys, values)` `(batch, heads, length * beam, dim)` from
                `empty_cache(..., beam_size=beam)` or the previous step; slot
                `j` of position `t` is row `t * beam + j`.
            cache_index: integer scalar (may be a tensor): the position.
            beam_mask: boolean `(batch, beam, cached_length * beam)`: `True`
                where hypothesis `k` may attend to slot `j` of position `t`
                (flat index `t * beam + j`), with `cached_length` the length
                of the cache after this step's write.
            window: restrict attention to this distance (§4).
            append: the cache holds exactly the positions before
                `cache_index` and grows by this one (shapes change every
                step: a TensorFlow graph, not XLA); otherwise the step is
                written at `cache_index` into a fixed-size cache.

        Returns:
            `(output, scores, cache)`: `(batch, beam, output_dim)`,
            `(batch, heads, beam, cached_length * beam)` and the new cache.

        Reference: Vaswani et al. (2017), §3.2.3 and §6.1.
        """
        # (batch, heads, beam, dim): the slots of position `cache_index`.
        keys, values = self.project_key_value(hypotheses)
        index = ops.cast(cache_index, "int32")
        beam = ops.shape(hypotheses)[1]
        if append:
            cache = (
                ops.concatenate([cache[0], keys], axis=2),
                ops.concatenate([cache[1], values], axis=2),
            )
        else:
            start = (0, 0, index * beam, 0)
            cache = (
                ops.slice_update(cache[0], start, keys),
                ops.slice_update(cache[1], start, values),
            )
        # (batch, 1, beam, length * beam): one mask for every head.
        mask = ops.expand_dims(ops.cast(beam_mask, "bool"), 1)
        if window is not None:
            slots = ops.shape(cache[0])[2]
            positions = ops.floor_divide(ops.arange(slots, dtype="int32"), beam)
            mask = ops.logical_and(mask, ops.less_equal(index - positions, window))
        output, scores = self.attend(
            self.project_query(hypotheses), cache[0], cache[1], mask, training=False
        )
        return output, scores, cache

    # ------------------------------------------------------------------- call
    def call(
        self,
        query: Any,
        value: Any,
        key: Any | None = None,
        attention_mask: Any | None = None,
        use_causal_mask: bool = False,
        return_attention_scores: bool = False,
        training: bool | None = None,
        query_mask: Any | None = None,
        value_mask: Any | None = None,
        key_mask: Any | None = None,
    ) -> Any:
        mask = masking.merge_attention_masks(
            query_length=ops.shape(query)[1],
            key_length=ops.shape(value)[1],
            query_mask=query_mask,
            key_mask=key_mask if key_mask is not None else value_mask,
            attention_mask=attention_mask,
            use_causal_mask=use_causal_mask,
        )
        if mask is not None:
            # (batch, 1, query_length, key_length): one mask for every head.
            mask = ops.expand_dims(mask, axis=-3)
        keys, values = self.project_key_value(value, key)
        output, scores = self.attend(
            self.project_query(query), keys, values, mask, training=training
        )
        if return_attention_scores:
            return output, scores
        return output

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
        value: Any,
        key: Any | None = None,
        attention_mask: Any | None = None,
        use_causal_mask: bool = False,
        return_attention_scores: bool = False,
        training: bool | None = None,
        query_mask: Any | None = None,
        value_mask: Any | None = None,
        key_mask: Any | None = None,
    ) -> Any:
        output_shape = self.compute_output_shape(query.shape, value.shape)
        output = keras.KerasTensor(output_shape, dtype=self.compute_dtype)
        if not return_attention_scores:
            return output
        # The key length comes from the value (cross-attention included).
        scores_shape = (query.shape[0], self.num_heads, query.shape[1], value.shape[1])
        return output, keras.KerasTensor(scores_shape, dtype="float32")

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
            }
        )
        return config


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


def _scaled(weight: Any, scale: float) -> Any:
    """`weight * scale` (None stays None; a scale of 1 leaves it untouched)."""
    if weight is None or scale == 1.0:
        return weight
    return ops.multiply(weight, scale)

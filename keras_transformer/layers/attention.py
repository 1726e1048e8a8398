"""Multi-head attention (Eqs. 2-3), optionally with relative position
representations (Shaw et al., 2018) and grouped-query attention (Ainslie et
al., 2023); Eq. 1 itself is `scaled_attention.scaled_dot_product_attention`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import keras
from keras import ops

from keras_transformer.backend import linear
from keras_transformer.backend.portable import reshape_target
from keras_transformer.layers import masking
from keras_transformer.layers.attention_settings import AttentionSettings
from keras_transformer.layers.scaled_attention import (
    relative_position_index,
    scaled_dot_product_attention,
)
from keras_transformer.validation import check_positive_int


class AttentionResult(NamedTuple):
    """What every attention layer's `call` returns (one shape for every call).

    Attributes:
        output: `(batch, query_length, output_dim)` (`(batch, rows, cols,
            output_dim)` for `LocalAttention2D` without a cache).
        scores: the float32 attention weights (`(batch, heads, query_length,
            key_length)`, or the blocked layout of a local layer).
        cache: the updated `(keys, values)` when called with a cache, else
            `()` (no tensor: Keras traces every output).
    """

    output: Any
    scores: Any
    cache: tuple[Any, ...] = ()


class CachedCall(NamedTuple):
    """The arguments of `MultiHeadAttention.call` with a cache, as
    `_attend_cache` (the one cached path a subclass overrides) gets them."""

    value: Any | None
    key: Any | None
    masks: dict[str, Any]
    cache: tuple[Any, Any]
    cache_update_index: Any | None
    positions: tuple[Any, Any] | None


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
        settings: the `AttentionSettings` (or a mapping of its fields): the
            dropout on the weights, the biases, the relative positions of
            Shaw et al. (2018) (`q_i . a^K_ij`, one embedding per clipped
            distance, shared by the heads, at the positions of the query and
            key sequences or of the cache rows: use them for
            self-attention) and the key/value heads of grouped-query
            attention (Ainslie et al., 2023). Its `window` is read by the
            blocks, which choose `RestrictedMultiHeadAttention` for it.
        kernel_initializer: initializer of the projection kernels.
        bias_initializer: initializer of the biases.
        **kwargs: base `keras.layers.Layer` arguments (`name`, `dtype`, ...).

    Call arguments:
        query: `(batch, query_length, query_dim)`.
        value: `(batch, key_length, value_input_dim)`; `None`: self-attention.
        key: optional `(batch, key_length, key_input_dim)`; defaults to value.
        attention_mask: optional boolean `(batch, query_length, key_length)`
            (a batch of 1 is shared), `True` means "may attend"; with a
            cache, over the cache rows.
        use_causal_mask: forbid attending to later positions (decoder
            self-attention, §3.2.3).
        training: whether attention dropout is active.
        query_mask, value_mask, key_mask: padding masks `(batch, length)`,
            filled in automatically by Keras from `mask_zero=True` embeddings.
        cache: `(keys, values)` from `empty_cache` (or the previous call), or
            fixed keys and values from `project_key_value`: the queries attend
            over its rows (inference, no dropout).
        cache_update_index: with `cache`, the row where this call's keys and
            values are written (`None`: the cache is read as it is).
        positions: with `cache`, `(query_positions, row_positions)`, int
            `(query_length,)` and `(rows,)`: where the queries and the cache
            rows sit, for the causal mask, a window and relative positions;
            defaults to the queries at `cache_update_index + i` and row `r`
            at `r`. A search that keeps several hypotheses per position in
            one cache says here which position each row holds.

    Returns:
        `AttentionResult(output, scores, cache)`: the output `(batch,
        query_length, output_dim)`, the scores `(batch, num_heads,
        query_length, key_length)` and the updated cache (`()` without
        one).

    Example:
    >>> import numpy as np
    >>> layer = MultiHeadAttention(num_heads=2, key_dim=4)
    >>> x = np.random.rand(3, 5, 8).astype("float32")
    >>> out, scores, _ = layer(x, x)
    >>> tuple(out.shape), tuple(scores.shape)
    ((3, 5, 8), (3, 2, 5, 5))

    Reference: Vaswani et al. (2017), §3.2.2, Eqs. 2-3; Shaw et al. (2018),
    "Self-Attention with Relative Position Representations", Eqs. 3-5;
    Ainslie et al. (2023), "GQA: Training Generalized Multi-Query
    Transformer Models from Multi-Head Checkpoints".
    """

    def __init__(
        self,
        num_heads: int,
        key_dim: int,
        value_dim: int | None = None,
        output_dim: int | None = None,
        settings: AttentionSettings | dict[str, Any] | None = None,
        kernel_initializer: str | keras.initializers.Initializer = "glorot_uniform",
        bias_initializer: str | keras.initializers.Initializer = "zeros",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.settings = AttentionSettings.of(settings)
        check_positive_int("num_heads", num_heads)
        check_positive_int("key_dim", key_dim)
        for name, size in (("value_dim", value_dim), ("output_dim", output_dim)):
            check_positive_int(name, size, allow_none=True)
        self.num_heads = num_heads
        self.num_key_value_heads = self.settings.key_value_heads(num_heads)
        self.key_dim = key_dim
        self.value_dim = value_dim if value_dim is not None else key_dim
        self.output_dim = output_dim
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.supports_masking = True
        self.seed_generator = (
            keras.random.SeedGenerator(0) if self.settings.dropout > 0 else None
        )

    # ------------------------------------------------------------------ build
    def build(
        self,
        query_shape: Sequence[int | None],
        value_shape: Sequence[int | None] | None = None,
        key_shape: Sequence[int | None] | None = None,
    ) -> None:
        value_shape = query_shape if value_shape is None else value_shape
        key_shape = value_shape if key_shape is None else key_shape
        query_dim = masking.input_features("query", query_shape)
        output_dim = self.output_dim or query_dim
        heads, d_k, d_v = self.num_heads, self.key_dim, self.value_dim
        kv_heads = self.num_key_value_heads
        sizes = {
            "query": (query_dim, heads * d_k),
            "key": (masking.input_features("key", key_shape), kv_heads * d_k),
            "value": (masking.input_features("value", value_shape), kv_heads * d_v),
            # W^O in Eq. 2: (h * d_v, output_dim).
            "output": (heads * d_v, output_dim),
        }
        # The kernels, then the biases: the order of the variables (and of
        # their random initialisation) that checkpoints hold.
        for name, shape in sizes.items():
            setattr(self, f"{name}_kernel", self._weight(f"{name}_kernel", shape))
        for name, shape in sizes.items():
            bias = None
            if self.settings.use_bias:
                bias = self._weight(f"{name}_bias", shape[1:], self.bias_initializer)
            setattr(self, f"{name}_bias", bias)
        # Shaw et al. (2018): a^K (and a^V), one row per clipped distance
        # -k..k, shared by the heads; created only when asked for, so the
        # variables of other models keep their names.
        self.relative_key_embeddings = self.relative_value_embeddings = None
        relative = self.settings.relative_positions
        if relative is not None:
            distances = 2 * relative + 1
            self.relative_key_embeddings = self._weight(
                "relative_key_embeddings", (distances, d_k)
            )
            if self.settings.relative_values:
                self.relative_value_embeddings = self._weight(
                    "relative_value_embeddings", (distances, d_v)
                )
        self._output_dim = output_dim
        self.built = True

    def _weight(self, name: str, shape: tuple, initializer: Any = None) -> Any:
        initializer = initializer or self.kernel_initializer
        return self.add_weight(name=name, shape=shape, initializer=initializer)

    # ------------------------------------------------------------ projections
    def _project(
        self,
        inputs: Any,
        kernel: Any,
        bias: Any,
        head_dim: int,
        heads: int,
        scale: float = 1.0,
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
        return self._split_heads(outputs, heads, head_dim)

    @staticmethod
    def _split_heads(outputs: Any, heads: int, head_dim: int) -> Any:
        """(batch, length, heads * head_dim) -> (batch, heads, length, head_dim)."""
        outputs = ops.reshape(outputs, (*reshape_target(outputs, 2), heads, head_dim))
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
            self.num_heads,
            scale=self.query_scale,
        )

    def project_key_value(self, value: Any, key: Any | None = None) -> tuple[Any, Any]:
        """K W^K and V W^V split into the key/value heads.

        Used for incremental decoding: encoder-decoder attention computes its
        keys and values once per source sentence (a fixed cross-attention
        cache), and decoder self-attention writes one position per step.

        Returns:
            `(keys, values)` of shapes `(batch, kv_heads, key_length,
            key_dim)` and `(batch, kv_heads, key_length, value_dim)`.
        """
        value = ops.cast(value, self.compute_dtype)
        heads = self.num_key_value_heads
        if key is None and self.value_dim == self.key_dim:
            # Keys and values of the same sequence: one product, one transpose.
            outputs = linear(
                value,
                ops.concatenate([self.key_kernel, self.value_kernel], axis=1),
                _concatenated(self.key_bias, self.value_bias),
            )
            return self._stacked_heads(outputs, 2, heads)
        key = value if key is None else ops.cast(key, self.compute_dtype)
        keys = self._project(key, self.key_kernel, self.key_bias, self.key_dim, heads)
        values = self._project(
            value, self.value_kernel, self.value_bias, self.value_dim, heads
        )
        return keys, values

    def project_self_attention(self, inputs: Any) -> tuple[Any, Any, Any]:
        """Q W^Q / sqrt(d_k), K W^K and V W^V of one sequence in one product.

        Self-attention projects the same inputs three times; concatenating
        the three kernels makes that one larger (and faster) product. The
        queries are scaled as by `project_query`.

        Returns:
            `(queries, keys, values)`, each `(batch, heads, length, dim)`
            (the keys and values with the key/value heads).
        """
        inputs = ops.cast(inputs, self.compute_dtype)
        kernel = ops.concatenate(
            [
                _scaled(self.query_kernel, self.query_scale),
                self.key_kernel,
                self.value_kernel,
            ],
            axis=1,
        )
        bias = None
        if self.query_bias is not None:
            bias = _concatenated(
                _scaled(self.query_bias, self.query_scale),
                self.key_bias,
                self.value_bias,
            )
        # (batch, length, heads * key_dim + kv_heads * (key_dim + value_dim))
        outputs = linear(inputs, kernel, bias)
        heads, kv_heads = self.num_heads, self.num_key_value_heads
        if self.value_dim == self.key_dim and kv_heads == heads:
            return self._stacked_heads(outputs, 3, heads)
        query_size, key_size = heads * self.key_dim, kv_heads * self.key_dim
        projections = ops.split(outputs, [query_size, query_size + key_size], axis=-1)
        shapes = (
            (heads, self.key_dim),
            (kv_heads, self.key_dim),
            (kv_heads, self.value_dim),
        )
        return tuple(
            self._split_heads(projection, *shape)
            for projection, shape in zip(projections, shapes, strict=True)
        )

    def _stacked_heads(self, outputs: Any, count: int, heads: int) -> tuple[Any, ...]:
        """Splits `count` concatenated projections into heads, each
        `(batch, heads, length, key_dim)`.

        One transpose for all of them, (batch, length, count, heads, dim) ->
        (count, batch, heads, length, dim), then slices along the first axis
        (which TensorFlow takes without copying).
        """
        outputs = ops.reshape(
            outputs, (*reshape_target(outputs, 2), count, heads, self.key_dim)
        )
        return tuple(ops.unstack(ops.transpose(outputs, (2, 0, 3, 1, 4)), count))

    def combine_heads(self, heads_output: Any) -> Any:
        """Concat(head_1, ..., head_h) W^O of Eq. 2.

        Args:
            heads_output: `(batch, heads, query_length, value_dim)`.

        Returns:
            `(batch, query_length, output_dim)`.
        """
        # (batch, query_length, heads, value_dim)
        outputs = ops.transpose(heads_output, (0, 2, 1, 3))
        # (batch, query_length, heads * value_dim)
        outputs = ops.reshape(
            outputs, (*reshape_target(outputs, 2), self.num_heads * self.value_dim)
        )
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
                relative positions (which need them); ignored otherwise.

        Returns:
            `(output, scores)`: `(batch, query_length, output_dim)` and
            `(batch, heads, query_length, key_length)` float32 weights.
        """
        heads_output, scores = scaled_dot_product_attention(
            query_heads,
            keys,
            values,
            mask,
            **self.attention_arguments(positions, training),
        )
        return self.combine_heads(heads_output), scores

    def attention_arguments(
        self, positions: tuple[Any, Any] | None, training: bool | None
    ) -> dict[str, Any]:
        """The keyword arguments of `scaled_dot_product_attention` for heads
        projected by this layer (the queries already scaled): the dropout,
        the key/value head groups and, for `(query_positions,
        key_positions)`, the relative positions."""
        arguments = {
            "dropout_rate": self.settings.dropout,
            "training": training,
            "seed_generator": self.seed_generator,
            "scale": 1.0,
            "key_value_groups": self.num_heads // self.num_key_value_heads,
        }
        relative = self.settings.relative_positions
        if relative is None:
            return arguments
        if positions is None:
            raise ValueError(
                f"{type(self).__name__}(relative_positions={relative}) needs the "
                "positions of its queries and keys: call it on whole sequences "
                "or with a cache and cache_update_index (not on a fixed cache, "
                "nor attend() alone)."
            )
        return {
            **arguments,
            "relative_keys": self.relative_key_embeddings,
            "relative_values": self.relative_value_embeddings,
            "relative_index": relative_position_index(*positions, relative),
        }

    # ------------------------------------------------------ cached decoding
    def empty_cache(self, batch_size: Any, rows: int) -> tuple[Any, Any]:
        """A zero self-attention cache of `rows` rows, for `call(..., cache=...)`.

        Returns:
            `(keys, values)` of shapes `(batch, kv_heads, rows, key_dim)` and
            `(batch, kv_heads, rows, value_dim)`: the layout attention reads,
            so writing a step needs no reshape of the cache (under XLA, a
            reshape of the updated cache made it copy the whole cache at
            every step). The size is fixed, so a decoding loop keeps static
            shapes (XLA). What each row holds is the caller's (`positions`).
        """
        shape = (batch_size, self.num_key_value_heads, rows)
        return (
            ops.zeros((*shape, self.key_dim), self.compute_dtype),
            ops.zeros((*shape, self.value_dim), self.compute_dtype),
        )

    @property
    def cache_window(self) -> int | None:
        """How far back a cached query may attend (`None`: to every position)."""
        return None

    def _attend_cache(self, query: Any, call: CachedCall) -> AttentionResult:
        """`call` with a cache: write this call's keys and values, then attend.

        With `cache_update_index=None` the cache is read as it is (the
        encoder-decoder keys and values, computed once). Otherwise the keys
        and values of `value` (of `query` when `value` is None) go to rows
        `cache_update_index ...`; the queries then attend over every row of
        the cache, under `_cache_mask`.
        """
        keys, values = call.cache
        positions = call.positions
        if call.cache_update_index is not None:
            index = ops.cast(call.cache_update_index, "int32")
            step = self.project_key_value(
                query if call.value is None else call.value, call.key
            )
            keys, values = (
                ops.slice_update(old, (0, 0, index, 0), new)
                for old, new in zip((keys, values), step, strict=True)
            )
        # Static in a decoding step (one position): no Shape op to read it.
        query_length = query.shape[1] or ops.shape(query)[1]
        if call.cache_update_index is not None and positions is None:
            positions = (
                ops.arange(query_length, dtype="int32") + index,
                ops.arange(ops.shape(keys)[2], dtype="int32"),
            )
        mask = self._cache_mask(query_length, ops.shape(keys)[2], positions, call.masks)
        output, scores = self.attend(
            self.project_query(query), keys, values, mask, False, positions
        )
        return AttentionResult(output, scores, (keys, values))

    def _attend_cached_slots(
        self,
        query: Any,
        cache: tuple[Any, Any],
        index: Any,
        slots: Any,
        allowed: Any,
        positions: tuple[Any, Any] | None = None,
    ) -> AttentionResult:
        """One position's cached self-attention over a few rows of the cache
        (the memory of the local layers): the position's keys and values are
        written at row `index`, then its query attends to rows `slots`
        (`(W,)`) where `allowed` (`(W,)`) holds, at a cost of `O(W)`."""
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
        return AttentionResult(output, scores, (keys, values))

    def _cache_mask(
        self,
        query_length: Any,
        rows: Any,
        positions: tuple[Any, Any] | None,
        masks: dict[str, Any],
    ) -> Any | None:
        """The mask of cached attention, `(batch or 1, 1, query_length, rows)`.

        The caller's masks (`attention_mask` over the cache rows, e.g. each
        hypothesis' history in a beam search, and the padding masks), and,
        with `use_causal_mask` or a `cache_window` and the `positions` of a
        written call, the positions: a query sees the rows of the positions
        up to its own (and no farther back than the window).
        """
        mask = masking.merge_attention_masks(
            query_length,
            rows,
            query_mask=masks["query_mask"],
            key_mask=masks["key_mask"],
            attention_mask=masks["attention_mask"],
        )
        causal, window = masks["use_causal_mask"], self.cache_window
        if positions is not None and (causal or window is not None):
            # (query_length, rows): how far back each row lies.
            distance = positions[0][:, None] - positions[1][None, :]
            allowed = distance >= 0 if causal else ops.ones_like(distance, "bool")
            if window is not None:
                allowed = ops.logical_and(allowed, distance <= window)
            mask = allowed if mask is None else ops.logical_and(mask, allowed)
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
        training: bool | None = None,
        query_mask: Any | None = None,
        value_mask: Any | None = None,
        key_mask: Any | None = None,
        cache: tuple[Any, Any] | None = None,
        cache_update_index: Any | None = None,
        positions: tuple[Any, Any] | None = None,
    ) -> AttentionResult:
        masks = {
            "query_mask": query_mask,
            "key_mask": key_mask if key_mask is not None else value_mask,
            "attention_mask": attention_mask,
            "use_causal_mask": use_causal_mask,
        }
        if cache is not None:
            return self._attend_cache(
                query,
                CachedCall(value, key, masks, cache, cache_update_index, positions),
            )
        if cache_update_index is not None or positions is not None:
            raise ValueError(
                "cache_update_index and positions need a cache: pass "
                "cache=layer.empty_cache(batch, rows) too, or neither."
            )
        masking.check_attention_inputs(self, query, value, key)
        if value is None and key is None:
            # Self-attention: the three projections in one product.
            projected = self.project_self_attention(query)
        else:
            projected = (
                self.project_query(query),
                *self.project_key_value(query if value is None else value, key),
            )
        return AttentionResult(*self._attend_projected(*projected, masks, training))

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
        return self.attend(queries, keys, values, mask, training, positions)

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
    ) -> AttentionResult:
        """Shapes of `call`'s results (the call arguments as keywords)."""
        value = query if value is None else value
        output_shape = self.compute_output_shape(query.shape, value.shape)
        output = keras.KerasTensor(output_shape, dtype=self.compute_dtype)
        cache = kwargs.get("cache")
        # The key length comes from the value (cross-attention included), or
        # from the cache.
        key_length = value.shape[1] if cache is None else cache[0].shape[2]
        scores_shape = (query.shape[0], self.num_heads, query.shape[1], key_length)
        scores = keras.KerasTensor(scores_shape, dtype="float32")
        cache = () if cache is None else cache
        cache = tuple(keras.KerasTensor(c.shape, c.dtype) for c in cache)
        return AttentionResult(output, scores, cache)

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "key_dim": self.key_dim,
                "value_dim": self.value_dim,
                "output_dim": self.output_dim,
                "settings": self.settings.to_dict(),
                "kernel_initializer": keras.initializers.serialize(
                    self.kernel_initializer
                ),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            }
        )
        return config


def check_one_position_cache(layer: str, query: Any, call: CachedCall) -> None:
    """Raises the one-line `ValueError` of a local layer that samples with a
    cache one position at a time, unless `query` is one position with a
    `cache_update_index` and nothing else (no separate keys/values, masks or
    positions)."""
    given = [
        call.value,
        call.key,
        call.positions,
        *(call.masks[n] for n in ("query_mask", "key_mask", "attention_mask")),
    ]
    one_position = query.shape[1] == 1 and call.cache_update_index is not None
    if not one_position or any(item is not None for item in given):
        raise ValueError(
            f"{layer} with a cache samples one position at a time: pass query "
            "(batch, 1, features), cache and cache_update_index only. Received: "
            f"query.shape={tuple(query.shape)}, "
            f"cache_update_index={call.cache_update_index!r}"
        )


def _concatenated(*biases: Any) -> Any:
    """The biases side by side (`None` without biases)."""
    return None if biases[0] is None else ops.concatenate(list(biases))


def _scaled(weight: Any, scale: float) -> Any:
    """`weight * scale` (None stays None; a scale of 1 leaves it untouched)."""
    if weight is None or scale == 1.0:
        return weight
    return ops.multiply(weight, scale)

"""Restricted (local) self-attention, computed block by block in linear memory.

§4 and Table 1 of the paper note that self-attention "could be restricted to
considering only a neighborhood of size r in the input sequence centered
around the respective output position", lowering the cost per layer from
`O(n^2 * d)` to `O(r * n * d)` and raising the maximum path length from `O(1)`
to `O(n / r)`. The Image Transformer (Parmar et al., 2018) turns this into
*local 1D block attention*: queries are split into blocks, and each block
attends to a fixed memory around it.

Both layers here split the (internally padded) sequence into blocks of `b`
positions and, for each query block, gather the key/value blocks that can
hold an allowed key. The scores live in a `(batch, heads, n_blocks, b, W)`
tensor, `W` a small multiple of `b`, so time and memory grow linearly in the
sequence length `n`; an `n x n` matrix is never built (unless you ask for one
with `local_to_dense_scores` or pass a dense `attention_mask`).

Both layers subclass `MultiHeadAttention` and create exactly the same weights,
so `set_weights`/checkpoints move freely between full and local attention.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import keras
import numpy as np
from keras import ops

from keras_transformer.layers import masking
from keras_transformer.layers.attention import (
    AttentionResult,
    CachedCall,
    MultiHeadAttention,
    check_one_position_cache,
)
from keras_transformer.layers.masking import (
    local_block_attention_mask,
    restricted_attention_mask,
)
from keras_transformer.layers.scaled_attention import scaled_dot_product_attention
from keras_transformer.validation import check_int, check_positive_int

__all__ = [
    "LocalBlockAttention",
    "RestrictedMultiHeadAttention",
    "local_block_attention_mask",
    "restricted_attention_mask",
]


# ----------------------------------------------------------- shared engine
class _BlockedSelfAttention(MultiHeadAttention):
    """Self-attention restricted to a static window around each query block.

    Subclasses define the geometry with `_window_geometry(causal)`, which
    returns `(block, left, right)`: the query block `[k b, (k+1) b)` sees the
    keys `[k b - left, (k+1) b + right)`, a window of `W = left + b + right`
    keys; and `_relative_mask(causal)`, a static boolean `(b, W)` mask that
    applies to every block alike (the distance between query `i` of a block
    and key slot `m` of its window is `i - m + left`, whatever the block).
    """

    # --------------------------------------------------------- geometry
    def _window_geometry(self, causal: bool) -> tuple[int, int, int]:
        raise NotImplementedError

    def _relative_mask(self, causal: bool) -> np.ndarray:
        raise NotImplementedError

    def _distances(self, causal: bool) -> np.ndarray:
        """`(b, W)` int array: query position minus key position."""
        block, left, right = self._window_geometry(causal)
        width = left + block + right
        query_slots = np.arange(block)[:, None]
        key_slots = np.arange(width)[None, :]
        return query_slots - key_slots + left

    # ------------------------------------------------------------ core
    def attend_local(
        self,
        query_heads: Any,
        keys: Any,
        values: Any,
        query_mask: Any | None = None,
        key_mask: Any | None = None,
        use_causal_mask: bool = False,
        attention_mask: Any | None = None,
        training: bool | None = None,
    ) -> tuple[Any, Any]:
        """Blocked Eq. 1 on projected heads, then `W^O`.

        The local counterpart of `MultiHeadAttention.attend`, for blocks that
        project once and attend themselves (EncoderBlock, DecoderBlock).

        Args:
            query_heads: `(batch, heads, n, key_dim)` from `project_query`
                (already scaled by `1 / sqrt(d_k)`).
            keys, values: `(batch, heads, n, dim)` from `project_key_value`,
                the same length `n` as the queries.
            query_mask, key_mask: padding masks `(batch, n)`, `True` on real
                tokens.
            use_causal_mask: use the causal (left-only) window.
            attention_mask: optional dense boolean `(batch, n, n)`,
                gathered into the blocked layout (its own size is
                `O(n^2)`; prefer padding masks for long inputs).
            training: whether attention dropout is active.

        Returns:
            `(output, scores)`: `(batch, n, output_dim)` and float32 local
            weights `(batch, heads, n_blocks, block, W)`; see
            `local_to_dense_scores`.
        """
        block, left, right = self._window_geometry(use_causal_mask)
        length = query_heads.shape[2]
        if length is None:
            length = ops.shape(query_heads)[2]
        pad_end = (-length) % block

        # (batch, heads, n_blocks, block, key_dim)
        query_blocks = _split_blocks(query_heads, block, pad_end)
        # (batch, heads, n_blocks, W, key_dim)
        key_windows = _gather_windows(keys, block, left, right, pad_end)
        # (batch, heads, n_blocks, W, value_dim)
        value_windows = _gather_windows(values, block, left, right, pad_end)
        mask = self._local_mask(
            length, use_causal_mask, query_mask, key_mask, attention_mask
        )
        # Query slot i of a block sits at i, key slot m of its window at
        # m - left, whatever the block (relative positions, if any).
        positions = (np.arange(block), np.arange(left + block + right) - left)

        # Weights (batch, heads, n_blocks, block, W), accumulated in float32;
        # the queries carry the 1 / sqrt(d_k) of Eq. 1 (see `project_query`).
        # Output (batch, heads, n_blocks, block, value_dim).
        heads_output, weights = scaled_dot_product_attention(
            query_blocks,
            key_windows,
            value_windows,
            mask,
            **self.attention_arguments(positions, training),
        )
        batch = ops.shape(heads_output)[0]
        # (batch, heads, n_blocks * block, value_dim) -> (batch, heads, n, value_dim)
        heads_output = ops.reshape(
            heads_output, (batch, self.num_heads, -1, self.value_dim)
        )[:, :, :length]
        return self.combine_heads(heads_output), weights

    def _local_mask(
        self,
        length: Any,
        causal: bool,
        query_mask: Any | None,
        key_mask: Any | None,
        attention_mask: Any | None,
    ) -> Any:
        """The blocked mask, `(batch or 1, 1, n_blocks, block, W)`: the static
        band, the keys outside `[0, n)`, padding and a dense `attention_mask`."""
        masking.check_mask_shapes(length, length, query_mask, key_mask, attention_mask)
        block, left, right = self._window_geometry(causal)
        pad_end = (-length) % block
        # The static band; (1, 1, 1, block, W).
        mask = ops.convert_to_tensor(self._relative_mask(causal))[None, None, None]
        # Keys outside [0, n) and padded keys: (batch or 1, 1, n_blocks, 1, W).
        if key_mask is None:
            key_mask = ops.ones((1, length), "bool")
        key_valid = _gather_windows(
            ops.cast(key_mask, "float32")[:, None, :, None], block, left, right, pad_end
        )
        # (batch or 1, 1, n_blocks, W, 1) -> (batch or 1, 1, n_blocks, 1, W)
        key_valid = ops.swapaxes(key_valid > 0.5, -1, -2)
        mask = ops.logical_and(mask, key_valid)
        if query_mask is not None:
            # (batch, 1, n_blocks, block, 1)
            query_valid = _split_blocks(
                ops.cast(query_mask, "float32")[:, None, :, None], block, pad_end
            )
            mask = ops.logical_and(mask, query_valid > 0.5)
        if attention_mask is not None:
            mask = ops.logical_and(
                mask,
                _blocked_dense_mask(attention_mask, block, left, right, length),
            )
        return mask

    def local_to_dense_scores(self, scores: Any, length: int, causal: bool) -> Any:
        """Scatters blocked local weights into a dense `(batch, heads, n, n)`.

        Costs `O(batch * heads * n^2)` time and memory, which is what the
        blocked layout avoids: use it for plots and tests, not in training.

        Args:
            scores: `(batch, heads, n_blocks, block, W)` from the layer.
            length: the sequence length `n`.
            causal: whether `scores` came from a causal call (it sets `W`).

        Returns:
            float32 `(batch, heads, n, n)`: zero outside the window.
        """
        block, left, right = self._window_geometry(causal)
        width = left + block + right
        batch = ops.shape(scores)[0]
        # (batch, heads, n_blocks * block, W) -> (batch, heads, n, W)
        rows = ops.reshape(scores, (batch, self.num_heads, -1, width))[:, :, :length]
        positions = np.arange(length)
        starts = (positions // block) * block - left
        # (n, n): slot of key j in the window of query i.
        slots = positions[None, :] - starts[:, None]
        inside = ops.convert_to_tensor((slots >= 0) & (slots < width))
        slots = ops.convert_to_tensor(np.clip(slots, 0, width - 1).astype("int32"))
        gathered = ops.take_along_axis(
            rows,
            ops.broadcast_to(
                slots[None, None], (batch, self.num_heads, length, length)
            ),
            axis=-1,
        )
        return ops.where(inside[None, None], gathered, ops.zeros_like(gathered))

    # ------------------------------------------------------------ call
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
        padding_mask: Any | None = None,
        mask: Any | None = None,
    ) -> AttentionResult:
        if cache is None:
            self._check_self_attention(query, value, key)
        if query_mask is None:
            query_mask = mask
        if key_mask is None:
            key_mask = value_mask if value_mask is not None else mask
        if padding_mask is not None:
            masking.check_padding_mask("padding_mask", padding_mask)
            masking.check_mask_dtypes(padding_mask=padding_mask)
            query_mask = _and_masks(query_mask, padding_mask)
            if cache is None:  # a cache's rows are not the query's positions
                key_mask = _and_masks(key_mask, padding_mask)
        return super().call(
            query,
            value,
            key,
            attention_mask,
            use_causal_mask,
            training,
            query_mask,
            None,
            key_mask,
            cache,
            cache_update_index,
            positions,
        )

    def _attend_projected(
        self,
        queries: Any,
        keys: Any,
        values: Any,
        masks: dict[str, Any],
        training: bool | None,
    ) -> tuple[Any, Any]:
        """The blocked Eq. 1 (`attend_local`) in place of the dense one."""
        return self.attend_local(queries, keys, values, **masks, training=training)

    def _check_self_attention(self, query: Any, value: Any, key: Any | None) -> None:
        for name, tensor in (("value", value), ("key", key)):
            if tensor is not None:
                _check_same_length(type(self).__name__, query.shape, name, tensor.shape)

    # ------------------------------------------------------- Keras glue
    def build(
        self,
        query_shape: Sequence[int | None],
        value_shape: Sequence[int | None] | None = None,
        key_shape: Sequence[int | None] | None = None,
    ) -> None:
        for name, shape in (("value", value_shape), ("key", key_shape)):
            _check_same_length(type(self).__name__, query_shape, name, shape)
        super().build(query_shape, value_shape, key_shape)

    def compute_output_spec(
        self,
        query: Any,
        value: Any | None = None,
        key: Any | None = None,
        **kwargs: Any,
    ) -> AttentionResult:
        """Shapes of `call`'s results: the scores in the blocked layout."""
        result = super().compute_output_spec(query, value, key, **kwargs)
        if kwargs.get("cache") is not None:
            return result
        block, left, right = self._window_geometry(kwargs.get("use_causal_mask"))
        length = query.shape[1]
        n_blocks = None if length is None else -(-length // block)
        shape = (query.shape[0], self.num_heads, n_blocks, block, left + block + right)
        return result._replace(scores=keras.KerasTensor(shape, dtype="float32"))


# ------------------------------------------------------------- layers
@keras.saving.register_keras_serializable(package="keras_transformer")
class RestrictedMultiHeadAttention(_BlockedSelfAttention):
    """Multi-head self-attention restricted to a neighbourhood of radius `r`.

    Query `i` attends only to the keys `j` with `|i - j| <= window` (paper §4,
    "restricted" self-attention), or `i - window <= j <= i` with
    `use_causal_mask=True`. The sequence is padded to a multiple of the block
    size `b` (default `b = window`), split into blocks, and each query block
    attends to the key blocks that can hold a key within distance `r`: a
    window of `W = b + 2r` keys (`3b` when `b = r`), or `W = b + r` (`2b`)
    when causal. The exact band `|i - j| <= r` is applied inside each local
    `(b, W)` score matrix, so the cost is `O(n * W * d)` time and
    `O(batch * heads * n * W)` memory: linear in `n` for a fixed window.

    The weights are those of `MultiHeadAttention` (same names, same shapes),
    so a trained full-attention layer can be restricted with `set_weights`.

    Args:
        num_heads: number of heads `h`.
        key_dim: size `d_k` of each query/key head.
        window: the radius `r >= 1`; keys farther than `r` positions are
            ignored. With `r >= n - 1` the layer equals full attention.
        block_size: the query block length `b`; defaults to `window`. Smaller
            blocks waste fewer masked slots (`W = b + 2r`) but run more,
            smaller matrix products.
        value_dim, output_dim, settings, kernel_initializer,
        bias_initializer: as for `MultiHeadAttention`.
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Call arguments:
        query: `(batch, n, features)`.
        value: optional `(batch, n, features)`; defaults to `query`. Its
            length must equal the query length (self-attention only; a
            `ValueError` is raised otherwise).
        key: optional, defaults to `value`.
        attention_mask: optional dense boolean `(batch, n, n)` combined
            with the band; gathered into blocks, but the mask itself costs
            `O(n^2)` memory: prefer `padding_mask`.
        use_causal_mask: left-only window, keys `[i - r, i]`.
        training: whether attention dropout is active.
        padding_mask: boolean `(batch, n)`, `True` on real tokens. Padded
            keys get zero weight; padded queries get an all-zero weight row
            (as `MultiHeadAttention` with the same padding masks).
        query_mask, value_mask, key_mask, mask: padding masks filled in by
            Keras from `mask_zero=True` embeddings (`mask` when the layer is
            called on the query alone); combined with `padding_mask`.
        cache, cache_update_index, positions: as for `MultiHeadAttention`.

    Returns:
        `AttentionResult(output, scores, cache)`: `(batch, n, output_dim)`,
        and the scores, the float32 attention weights in the *blocked* layout
        `(batch, heads, n_blocks, b, W)`, `n_blocks = ceil(n / b)`: row `i`
        of block `k` is query `k b + i`, slot `m` is key `k b - r + m`. Use
        `local_to_dense_scores` for a dense `(batch, heads, n, n)` tensor (an
        `O(n^2)` cost paid only when asked).

    Example:
    >>> import numpy as np
    >>> layer = RestrictedMultiHeadAttention(num_heads=2, key_dim=4, window=3)
    >>> x = np.random.rand(2, 10, 8).astype("float32")
    >>> out, scores, _ = layer(x)
    >>> tuple(out.shape), tuple(scores.shape)
    ((2, 10, 8), (2, 2, 4, 3, 9))

    Incremental decoding: `call(x_step, cache=layer.empty_cache(batch, n),
    cache_update_index=t, use_causal_mask=True)`, a query attending to the
    last `r + 1` positions (`cache_window`).

    Reference: Vaswani et al. (2017), §4 and Table 1 (restricted
    self-attention, `O(r n d)` per layer, path length `O(n / r)`); Parmar et
    al. (2018), "Image Transformer", §3.2 (local 1D attention).
    """

    def __init__(
        self,
        num_heads: int,
        key_dim: int,
        window: int,
        block_size: int | None = None,
        **kwargs: Any,
    ) -> None:
        check_positive_int("window", window)
        if block_size is not None:
            check_positive_int("block_size", block_size)
        super().__init__(num_heads=num_heads, key_dim=key_dim, **kwargs)
        self.window = window
        self.block_size = block_size

    def _window_geometry(self, causal: bool) -> tuple[int, int, int]:
        block = self.block_size or self.window
        return block, self.window, 0 if causal else self.window

    def _relative_mask(self, causal: bool) -> np.ndarray:
        distance = self._distances(causal)
        if causal:
            return (distance >= 0) & (distance <= self.window)
        return np.abs(distance) <= self.window

    # -------------------------------------------------- cached decoding
    @property
    def cache_window(self) -> int | None:
        """With a cache, a query attends to the last `window + 1` positions."""
        return self.window

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update({"window": self.window, "block_size": self.block_size})
        return config


@keras.saving.register_keras_serializable(package="keras_transformer")
class LocalBlockAttention(_BlockedSelfAttention):
    """Local 1D block self-attention of the Image Transformer.

    The sequence is split into query blocks of `l_q = query_block_length`
    positions; each block attends to a memory of the `l_m = memory_length`
    positions preceding it plus the block itself (`W = l_m + l_q` keys), and
    with `use_causal_mask=True` each query sees only the keys up to itself.
    Cost `O(n * (l_m + l_q) * d)`, linear in `n`. The same weights as
    `MultiHeadAttention`.

    Args:
        num_heads: number of heads `h`.
        key_dim: size `d_k` of each query/key head.
        query_block_length: `l_q >= 1`.
        memory_length: `l_m >= 0` (0: block-diagonal attention).
        value_dim, output_dim, settings, kernel_initializer,
        bias_initializer: as for `MultiHeadAttention`.
        **kwargs: base layer arguments.

    Call arguments:
        as for `RestrictedMultiHeadAttention` (`query`, `value`, `key`,
        `attention_mask`, `use_causal_mask`, `training`, `padding_mask`, the
        Keras masks and the cache).

    Returns:
        `AttentionResult`: `(batch, n, output_dim)`, float32 blocked
        weights `(batch, heads, n_blocks, l_q, l_m + l_q)`: row `i` of block
        `k` is query `k l_q + i`, slot `m` is key `k l_q - l_m + m`.

    Example:
    >>> import numpy as np
    >>> layer = LocalBlockAttention(
    ...     num_heads=2, key_dim=4, query_block_length=4, memory_length=8
    ... )
    >>> x = np.random.rand(2, 10, 8).astype("float32")
    >>> out, scores, _ = layer(x, use_causal_mask=True)
    >>> tuple(out.shape), tuple(scores.shape)
    ((2, 10, 8), (2, 2, 3, 4, 12))

    Sampling one position at a time: `call(x_p, cache=layer.empty_cache(batch,
    n), cache_update_index=p)`.

    Reference: Parmar et al. (2018), "Image Transformer", §3.2 (local 1D
    attention); Vaswani et al. (2017), §4 and Table 1.
    """

    def __init__(
        self,
        num_heads: int,
        key_dim: int,
        query_block_length: int,
        memory_length: int,
        **kwargs: Any,
    ) -> None:
        check_positive_int("query_block_length", query_block_length)
        check_int("memory_length", memory_length, 0)
        super().__init__(num_heads=num_heads, key_dim=key_dim, **kwargs)
        self.query_block_length = query_block_length
        self.memory_length = memory_length

    def _window_geometry(self, causal: bool) -> tuple[int, int, int]:
        return self.query_block_length, self.memory_length, 0

    def _relative_mask(self, causal: bool) -> np.ndarray:
        distance = self._distances(causal)
        if causal:
            return distance >= 0
        return np.ones_like(distance, dtype=bool)

    # ---------------------------------------------------- cached sampling
    def _attend_cache(self, query: Any, call: CachedCall) -> AttentionResult:
        """The causal output of one position, from the cached earlier positions.

        The keys and values of position `cache_update_index` are written into
        the cache; its query attends to the `l_m + l_q` cached slots of its
        memory window, `[s - l_m, s + l_q)` with `s = l_q floor(index /
        l_q)`, masked to the positions `<= index` that exist, at a cost of
        `O(l_m + l_q)`, not `O(n)`. Feeding positions `0, 1, ..., n - 1`
        reproduces `layer(x, use_causal_mask=True)` at every position.
        """
        check_one_position_cache("LocalBlockAttention", query, call)
        length = call.cache[0].shape[2]
        index = ops.cast(call.cache_update_index, "int32")
        # (W,): the positions of the memory window of the query's block.
        width = self.memory_length + self.query_block_length
        start = index // self.query_block_length * self.query_block_length
        positions = start - self.memory_length + ops.arange(width, dtype="int32")
        allowed = ops.logical_and(positions >= 0, positions <= index)
        slots = ops.clip(positions, 0, length - 1)
        return self._attend_cached_slots(
            query,
            call.cache,
            index,
            slots,
            allowed,
            positions=(ops.reshape(index, (1,)), positions),
        )

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(
            {
                "query_block_length": self.query_block_length,
                "memory_length": self.memory_length,
            }
        )
        return config


# ------------------------------------------------------------- helpers
def _check_same_length(
    layer: str,
    query_shape: Sequence[int | None],
    name: str,
    shape: Sequence[int | None] | None,
) -> None:
    """Raises `ValueError` when a static key/value length differs (cross-attention)."""
    if shape is None or len(shape) != 3 or len(query_shape) != 3:
        return
    if None not in (query_shape[1], shape[1]) and query_shape[1] != shape[1]:
        raise ValueError(
            f"{layer} is self-attention only: the `{name}` length must equal "
            f"the query length. Received: query.shape={tuple(query_shape)}, "
            f"{name}.shape={tuple(shape)}. Use MultiHeadAttention for "
            "cross-attention."
        )


def _and_masks(mask: Any | None, other: Any) -> Any:
    other = ops.cast(other, "bool")
    return other if mask is None else ops.logical_and(ops.cast(mask, "bool"), other)


def _split_blocks(x: Any, block: int, pad_end: Any) -> Any:
    """`(batch, heads, n, dim)` -> `(batch, heads, n_blocks, block, dim)`."""
    x = ops.pad(x, [[0, 0], [0, 0], [0, pad_end], [0, 0]])
    batch, heads, dim = ops.shape(x)[0], ops.shape(x)[1], x.shape[-1]
    # (batch, heads, n_blocks, block, dim)
    return ops.reshape(x, (batch, heads, -1, block, dim))


def _gather_windows(x: Any, block: int, left: int, right: int, pad_end: Any) -> Any:
    """The keys `[k b - left, (k+1) b + right)` of every block `k`, zero-padded.

    Args:
        x: `(batch, heads, n, dim)`.
        block: the block length `b`.
        left, right: how far the window reaches before and after the block.
        pad_end: padding that makes `n` a multiple of `b`.

    Returns:
        `(batch, heads, n_blocks, left + block + right, dim)`.
    """
    blocks_left = -(-left // block)
    blocks_right = -(-right // block)
    span = blocks_left + blocks_right
    x = ops.pad(
        x,
        [[0, 0], [0, 0], [blocks_left * block, blocks_right * block + pad_end], [0, 0]],
    )
    batch, heads, dim = ops.shape(x)[0], ops.shape(x)[1], x.shape[-1]
    # (batch, heads, blocks_left + n_blocks + blocks_right, block, dim)
    blocks = ops.reshape(x, (batch, heads, -1, block, dim))
    # Block k's neighbours k - blocks_left .. k + blocks_right, side by side:
    # (batch, heads, n_blocks, (span + 1) * block, dim)
    windows = ops.concatenate(
        [blocks[:, :, j : (j - span) or None] for j in range(span + 1)], axis=3
    )
    start = blocks_left * block - left
    # (batch, heads, n_blocks, left + block + right, dim)
    return windows[:, :, :, start : start + left + block + right]


def _blocked_dense_mask(
    attention_mask: Any, block: int, left: int, right: int, length: Any
) -> Any:
    """A dense `(batch, n, n)` mask in the blocked layout.

    Returns:
        boolean `(batch or 1, 1, n_blocks, block, W)`; `False` for keys
        outside `[0, n)`.
    """
    mask = ops.cast(attention_mask, "int32")
    width = left + block + right
    pad_end = (-length) % block
    # (batch, n_blocks * block, n) -> (batch, n_blocks, block, n)
    mask = ops.pad(mask, [[0, 0], [0, pad_end], [0, 0]])
    batch = ops.shape(mask)[0]
    mask = ops.reshape(mask, (batch, -1, block, length))
    n_blocks = ops.shape(mask)[1]
    # (n_blocks, W): the key position of every window slot.
    positions = (
        ops.expand_dims(ops.arange(n_blocks, dtype="int32") * block - left, 1)
        + ops.arange(width, dtype="int32")[None]
    )
    inside = ops.logical_and(positions >= 0, positions < length)
    index = ops.clip(positions, 0, length - 1)
    # (batch, n_blocks, block, W)
    index = ops.broadcast_to(index[None, :, None, :], (batch, n_blocks, block, width))
    gathered = ops.take_along_axis(mask, index, axis=-1) > 0
    gathered = ops.logical_and(gathered, inside[None, :, None, :])
    # (batch, 1, n_blocks, block, W)
    return gathered[:, None]

"""Local 2D block self-attention of the Image Transformer (Parmar et al., 2018).

An image of `height x width x channels` intensities is a grid of positions:
with the paper's channel-wise positions every intensity is one position, so
the grid has `rows = height` and `cols = width * channels` (the channels of
a pixel side by side, innermost), and *raster order* reads it row by row,
left to right. The layer takes that grid as a rank-4 tensor `(batch, rows,
cols, d_model)`; flattening it row-major, `(batch, rows * cols, d_model)`,
gives the raster-order sequence that `MultiHeadAttention` and
`LocalBlockAttention` see.

The grid is cut into non-overlapping query blocks of `query_block = (h_q,
w_q)` positions. Each query block attends to its *memory block*: the query
block extended by `memory_flange = (h_m, w_m)`, i.e. `h_m` rows above it and
`w_m` columns to its left and to its right (Parmar et al., §3.2, Figure 2).
With `use_causal_mask=True` a query also never sees a key that is generated
after it (it sees itself and the earlier positions of its memory block,
`MultiHeadAttention`'s causal convention). The *generation order* is one of
`GENERATION_ORDERS`:

- `"blocks"` (the default, the paper's): "we generate the image one query
  block after another, ordering the blocks in raster-scan order" (§3.2),
  and the positions within a query block in raster order. A query sees all
  of the memory block that lies in earlier query blocks (its right flange
  included: the blocks above and to the right come earlier) and the earlier
  positions of its own query block;
- `"image"`: one raster order over the whole image (this package's
  order up to 0.1.0, kept for the models trained with it): the right
  flange only contributes from the rows above the query's.

A model that must not see the intensity it predicts feeds the layer its
input shifted right by one position *in the generation order*, as the
Transformer decoder shifts its targets (§3.2.3 of Vaswani et al.):
`ImageEmbedding` does, given the same query blocks.

Keys and values are gathered block by block with pads and reshapes; the
scores live in a `(batch, heads, n_row_blocks, n_col_blocks, h_q w_q,
(h_m + h_q)(w_q + 2 w_m))` tensor, so time and memory grow linearly with the
number of positions. The dense equivalent, an `(n, n)` mask, is built only by
`local_2d_attention_mask` (for tests and small inputs).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import keras
import numpy as np
from keras import ops

from keras_transformer.layers.attention import (
    AttentionResult,
    CachedCall,
    MultiHeadAttention,
    check_one_position_cache,
)
from keras_transformer.layers.scaled_attention import scaled_dot_product_attention
from keras_transformer.validation import (
    check_choice,
    check_grid,
    check_pair,
)

__all__ = [
    "GENERATION_ORDERS",
    "LocalAttention2D",
    "generation_positions",
    "local_2d_attention_mask",
]

#: The orders in which an image's positions are generated: query block after
#: query block (§3.2, the default) or one raster order over the whole image.
GENERATION_ORDERS = ("blocks", "image")


def _check_generation_order(generation_order: Any) -> str:
    check_choice("generation_order", generation_order, GENERATION_ORDERS)
    return generation_order


# ------------------------------------------------------ the generation order
def generation_positions(
    rows: int,
    cols: int,
    query_block: Sequence[int] | None,
    generation_order: str = "blocks",
) -> np.ndarray:
    """The raster positions of a `rows x cols` grid in the order they are generated.

    With `generation_order="blocks"` (Parmar et al. 2018, §3.2): the query
    blocks of `query_block = (h_q, w_q)` one after another in raster order,
    the positions of each block in raster order. With `"image"`, or
    `query_block=None` (one block: the whole grid), `0, 1, ..., n - 1`.

    Args:
        rows, cols: the grid of positions.
        query_block: `(h_q, w_q)`, tiling the grid, or `None`.
        generation_order: one of `GENERATION_ORDERS`.

    Returns:
        int64 `(rows * cols,)`: entry `t` is the raster position `row * cols
        + col` generated at step `t`. Its inverse, `np.argsort`, gives each
        position's step.

    Example:
    >>> generation_positions(2, 4, (2, 2)).tolist()
    [0, 1, 4, 5, 2, 3, 6, 7]
    """
    _check_generation_order(generation_order)
    positions = np.arange(rows * cols)
    if generation_order == "image" or query_block is None:
        return positions
    h_q, w_q = check_pair("query_block", query_block, 1)
    check_grid(rows, cols, (h_q, w_q))
    # (R, h_q, C, w_q) -> (R, C, h_q, w_q): block by block, raster inside.
    blocks = positions.reshape(rows // h_q, h_q, cols // w_q, w_q)
    return blocks.transpose(0, 2, 1, 3).reshape(-1)


# ------------------------------------------------------------- dense mask
def local_2d_attention_mask(
    height: int,
    width: int,
    query_block: Sequence[int],
    memory_flange: Sequence[int],
    causal: bool = False,
    generation_order: str = "blocks",
) -> Any:
    """The dense equivalent of `LocalAttention2D`'s memory blocks.

    Positions are numbered in raster order, `p = row * width + col`. Query
    `(r, c)` lies in the block whose top-left position is `(r0, c0) = (h_q
    floor(r / h_q), w_q floor(c / w_q))` and may attend to the key `(r', c')`
    when `r0 - h_m <= r' < r0 + h_q` and `c0 - w_m <= c' < c0 + w_q + w_m`
    (and, when `causal`, when the key is generated no later than the query
    in `generation_order`, see `generation_positions`). Costs `O((height *
    width)^2)`: for tests and small images.

    Args:
        height: the rows of the grid (the image height).
        width: the columns of the grid, in positions (the image width times
            the channels with channel-wise positions).
        query_block: `(h_q, w_q)`, positive, dividing `(height, width)`.
        memory_flange: `(h_m, w_m)`, non-negative.
        causal: also mask the keys generated after each query.
        generation_order: `"blocks"` (query block after query block, §3.2)
            or `"image"` (one raster order over the whole image).

    Returns:
        boolean `(n, n)`, `n = height * width`, rows and columns in raster
        order; `True` means "may attend".

    Example:
    >>> import numpy as np
    >>> mask = local_2d_attention_mask(2, 4, (1, 2), (1, 1), causal=True)
    >>> np.asarray(mask).astype(int)[6].tolist()  # query (1, 2)
    [0, 1, 1, 1, 0, 1, 1, 0]

    Reference: Parmar et al. (2018), "Image Transformer", §3.2 and Figure 2.
    """
    query_block = check_pair("query_block", query_block, 1)
    memory_flange = check_pair("memory_flange", memory_flange, 0)
    check_grid(height, width, query_block)
    _check_generation_order(generation_order)
    (h_q, w_q), (h_m, w_m) = query_block, memory_flange
    positions = np.arange(height * width)
    rows, cols = positions // width, positions % width
    # (n, 1): the top-left corner of each query's block.
    top = ((rows // h_q) * h_q)[:, None]
    left = ((cols // w_q) * w_q)[:, None]
    mask = (
        (rows[None] >= top - h_m)
        & (rows[None] < top + h_q)
        & (cols[None] >= left - w_m)
        & (cols[None] < left + w_q + w_m)
    )
    if causal:
        # (n,): the step at which each position is generated.
        steps = np.argsort(
            generation_positions(height, width, query_block, generation_order)
        )
        mask &= steps[None] <= steps[:, None]
    return ops.convert_to_tensor(mask)


# ------------------------------------------------------------------- layer
@keras.saving.register_keras_serializable(package="keras_transformer")
class LocalAttention2D(MultiHeadAttention):
    """Local 2D block self-attention of the Image Transformer.

    The `(rows, cols)` grid of positions is cut into query blocks of
    `query_block = (h_q, w_q)` positions; every query block attends to the
    memory block that extends it by `memory_flange = (h_m, w_m)`: `h_m`
    rows above, `w_m` columns left and `w_m` right, `M = (h_m + h_q)(w_q + 2
    w_m)` keys, of which those outside the image are masked. With
    `use_causal_mask=True` each query also ignores the keys generated after
    it in `generation_order` (it sees itself: the causal convention of
    `MultiHeadAttention`; shift the model's inputs by one position in the
    same order so that an intensity is predicted from the earlier ones
    only). Cost `O(n * M * d)` for `n = rows * cols` positions.

    The weights are exactly those of `MultiHeadAttention` (same names and
    shapes), so `set_weights` moves them between full and local attention:
    on the raster-order sequence `x.reshape(batch, rows * cols, d)`, the layer
    equals `MultiHeadAttention` with the mask of `local_2d_attention_mask`
    (same `generation_order`). With one query block per row band, where
    both orders are the raster order, `query_block = (h_q, cols)` and
    `memory_flange = (h_m, w_m)` (any `w_m`: the side flanges fall outside
    the image), it equals `LocalBlockAttention(query_block_length=h_q * cols,
    memory_length=h_m * cols)` on that sequence.

    Args:
        num_heads: number of heads `h`.
        key_dim: size `d_k` of each query/key head.
        query_block: `(h_q, w_q)`, positive; must divide the grid's
            `(rows, cols)` (checked when the layer is built).
        memory_flange: `(h_m, w_m)`, non-negative.
        generation_order: the order of the causal mask: `"blocks"` (query
            block after query block, raster order inside each, as in §3.2)
            or `"image"` (one raster order over the whole image, this
            package's order up to 0.1.0). A saved layer without this setting
            loads with `"image"`, the order it was trained with.
        value_dim, output_dim, settings, kernel_initializer,
        bias_initializer: as for `MultiHeadAttention` (no relative
        positions: the memory blocks are two-dimensional).
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Call arguments:
        inputs: `(batch, rows, cols, features)` with static `rows` and
            `cols`; with channel-wise positions `rows` is the image height
            and `cols` the width times the channels, channels innermost.
        use_causal_mask: also mask the keys generated after each query
            (image generation).
        training: whether attention dropout is active.
        cache: `(keys, values)` from `empty_cache(batch, rows * cols)`:
            `inputs` is then one position, `(batch, 1, features)`, attending
            causally to its memory block (as for `MultiHeadAttention`).
        cache_update_index: with `cache`, the raster position of `inputs`.

    Returns:
        `AttentionResult(output, scores, cache)`: `(batch, rows, cols,
        output_dim)` (`(batch, 1, output_dim)` with a cache), float32
        weights in the blocked layout `(batch, heads, rows / h_q, cols /
        w_q, h_q * w_q, M)`: query slot `a w_q + b` of block `(i, j)` is
        position `(i h_q + a, j w_q + b)`, key slot `u (w_q + 2 w_m) + v` is
        position `(i h_q - h_m + u, j w_q - w_m + v)`. See
        `blocked_to_dense_scores`.

    Example:
    >>> import numpy as np
    >>> layer = LocalAttention2D(
    ...     num_heads=2, key_dim=4, query_block=(2, 6), memory_flange=(1, 3)
    ... )
    >>> x = np.random.rand(1, 4, 24, 8).astype("float32")  # a 4 x 8 RGB image
    >>> out, scores, _ = layer(x, use_causal_mask=True)
    >>> tuple(out.shape), tuple(scores.shape)
    ((1, 4, 24, 8), (1, 2, 2, 4, 12, 36))

    Sampling one position at a time: `call(x_p, cache=layer.empty_cache(batch,
    rows * cols), cache_update_index=p, use_causal_mask=True)`, the one
    cached call of every attention layer.

    Reference: Parmar et al. (2018), "Image Transformer", §3.2 (local 2D
    attention) and Figure 2.
    """

    def __init__(
        self,
        num_heads: int,
        key_dim: int,
        query_block: Sequence[int],
        memory_flange: Sequence[int],
        generation_order: str = "blocks",
        **kwargs: Any,
    ) -> None:
        query_block = check_pair("query_block", query_block, 1)
        memory_flange = check_pair("memory_flange", memory_flange, 0)
        _check_generation_order(generation_order)
        super().__init__(num_heads=num_heads, key_dim=key_dim, **kwargs)
        if self.settings.relative_positions is not None:
            raise ValueError(
                "LocalAttention2D does not take relative_positions: use "
                "MultiHeadAttention or LocalBlockAttention (attention='full' or "
                "'local_1d'). Received: "
                f"relative_positions={self.settings.relative_positions!r}"
            )
        self.query_block = query_block
        self.memory_flange = memory_flange
        self.generation_order = generation_order
        self.grid_shape: tuple[int, int] | None = None
        # (n,) int32: the step at which each raster position is generated.
        self._steps: np.ndarray | None = None

    # ------------------------------------------------------------ geometry
    @property
    def memory_shape(self) -> tuple[int, int]:
        """`(h_m + h_q, w_q + 2 w_m)`: the rows and columns of a memory block."""
        (h_q, w_q), (h_m, w_m) = self.query_block, self.memory_flange
        return h_m + h_q, w_q + 2 * w_m

    def _grid(self, shape: Sequence[int | None]) -> tuple[int, int]:
        if len(shape) != 4:
            raise ValueError(
                "LocalAttention2D expects `inputs` of rank 4, (batch, rows, "
                "cols, features), the image's positions in raster order with "
                "channels innermost (cols = width * channels). Received: "
                f"inputs.shape={tuple(shape)}"
            )
        rows, cols = shape[1], shape[2]
        check_grid(rows, cols, self.query_block)
        return int(rows), int(cols)

    def _block_masks(self, rows: int, cols: int, causal: bool) -> np.ndarray:
        """Static boolean `(n_row_blocks, n_col_blocks, h_q w_q, M)` mask.

        Keys outside the image are masked; with `causal`, so are the keys
        generated after the query, a comparison of relative offsets that is
        the same in every block.
        """
        (h_q, w_q), (h_m, w_m) = self.query_block, self.memory_flange
        mem_rows, mem_cols = self.memory_shape
        # Offsets from the block's top-left corner; (Q,) and (M,).
        query_r = np.repeat(np.arange(h_q), w_q)
        query_c = np.tile(np.arange(w_q), h_q)
        key_r = np.repeat(np.arange(mem_rows), mem_cols) - h_m
        key_c = np.tile(np.arange(mem_cols), mem_rows) - w_m
        # (n_row_blocks, n_col_blocks, 1, M): keys inside the image.
        row_inside = (np.arange(rows // h_q) * h_q)[:, None] + key_r[None] >= 0
        col_abs = (np.arange(cols // w_q) * w_q)[:, None] + key_c[None]
        col_inside = (col_abs >= 0) & (col_abs < cols)
        mask = (row_inside[:, None] & col_inside[None])[:, :, None, :]
        if causal:
            # (Q, M): the key is the query or comes before it in raster order.
            dr = key_r[None] - query_r[:, None]
            dc = key_c[None] - query_c[:, None]
            earlier = (dr < 0) | ((dr == 0) & (dc <= 0))
            if self.generation_order == "blocks":
                # (M,): the key's query block relative to the query's.
                block_r, block_c = key_r // h_q, key_c // w_q
                earlier_block = (block_r < 0) | ((block_r == 0) & (block_c < 0))
                same_block = (block_r == 0) & (block_c == 0)
                earlier = earlier_block[None] | (same_block[None] & earlier)
            mask = mask & earlier[None, None]
        else:
            mask = np.broadcast_to(
                mask, (*mask.shape[:2], h_q * w_q, mask.shape[3])
            ).copy()
        return mask

    # -------------------------------------------------------------- blocks
    def _query_blocks(self, x: Any, rows: int, cols: int) -> Any:
        """`(batch, heads, n, dim)` -> `(batch, heads, R, C, h_q w_q, dim)`."""
        h_q, w_q = self.query_block
        batch, heads, dim = ops.shape(x)[0], x.shape[1], x.shape[-1]
        # (batch, heads, R, h_q, C, w_q, dim)
        x = ops.reshape(x, (batch, heads, rows // h_q, h_q, cols // w_q, w_q, dim))
        # (batch, heads, R, C, h_q, w_q, dim)
        x = ops.transpose(x, (0, 1, 2, 4, 3, 5, 6))
        return ops.reshape(x, (batch, heads, rows // h_q, cols // w_q, h_q * w_q, dim))

    def _memory_blocks(self, x: Any, rows: int, cols: int) -> Any:
        """`(batch, heads, n, dim)` -> `(batch, heads, R, C, M, dim)`, zero-padded.

        Block `(i, j)` gets the positions of rows `[i h_q - h_m, (i+1) h_q)`
        and columns `[j w_q - w_m, (j+1) w_q + w_m)`, row-major. Each axis is
        padded by whole blocks and cut into blocks; side-by-side shifted
        slices of the block axis then hold every block's neighbours.
        """
        (h_q, w_q), (h_m, w_m) = self.query_block, self.memory_flange
        mem_rows, mem_cols = self.memory_shape
        n_r, n_c = rows // h_q, cols // w_q
        batch, heads, dim = ops.shape(x)[0], x.shape[1], x.shape[-1]
        # (batch, heads, rows, cols, dim)
        x = ops.reshape(x, (batch, heads, rows, cols, dim))

        # Rows: the h_m rows above each block. Pad whole blocks at the top.
        above = -(-h_m // h_q)
        x = ops.pad(x, [[0, 0], [0, 0], [above * h_q, 0], [0, 0], [0, 0]])
        # (batch, heads, above + R, h_q, cols, dim)
        x = ops.reshape(x, (batch, heads, above + n_r, h_q, cols, dim))
        # (batch, heads, R, (above + 1) h_q, cols, dim)
        x = ops.concatenate([x[:, :, k : k + n_r] for k in range(above + 1)], axis=3)
        start = above * h_q - h_m
        # (batch, heads, R, mem_rows, cols, dim)
        x = x[:, :, :, start : start + mem_rows]

        # Columns: w_m on each side. Pad whole blocks left and right.
        side = -(-w_m // w_q)
        x = ops.pad(
            x, [[0, 0], [0, 0], [0, 0], [0, 0], [side * w_q, side * w_q], [0, 0]]
        )
        # (batch, heads, R, mem_rows, 2 side + C, w_q, dim)
        x = ops.reshape(x, (batch, heads, n_r, mem_rows, 2 * side + n_c, w_q, dim))
        # (batch, heads, R, mem_rows, C, (2 side + 1) w_q, dim)
        x = ops.concatenate(
            [x[:, :, :, :, k : k + n_c] for k in range(2 * side + 1)], axis=5
        )
        start = side * w_q - w_m
        # (batch, heads, R, mem_rows, C, mem_cols, dim)
        x = x[:, :, :, :, :, start : start + mem_cols]
        # (batch, heads, R, C, mem_rows, mem_cols, dim)
        x = ops.transpose(x, (0, 1, 2, 4, 3, 5, 6))
        return ops.reshape(x, (batch, heads, n_r, n_c, mem_rows * mem_cols, dim))

    def _attend_blocks(
        self,
        queries: Any,
        keys: Any,
        values: Any,
        rows: int,
        cols: int,
        causal: bool,
        training: bool | None,
    ) -> tuple[Any, Any]:
        """Blocked Eq. 1 and `W^O` on raster-order heads `(batch, heads, n, dim)`.

        Returns:
            `(output, scores)`: `(batch, n, output_dim)` and the float32
            blocked weights `(batch, heads, R, C, Q, M)`.
        """
        h_q, w_q = self.query_block
        batch, dim = ops.shape(queries)[0], self.value_dim
        n_r, n_c = rows // h_q, cols // w_q
        mem_size = self.memory_shape[0] * self.memory_shape[1]

        def merge_blocks(x: Any) -> Any:
            # (batch, heads, R, C, slots, dim) -> (batch, heads, R C, slots, dim):
            # TensorFlow's softmax takes at most rank 5.
            return ops.reshape(x, (batch, -1, n_r * n_c, x.shape[-2], x.shape[-1]))

        mask = self._block_masks(rows, cols, causal).reshape(n_r * n_c, -1, mem_size)
        # Eq. 1 per block, the weights (batch, heads, R C, Q, M) in float32:
        # the queries (batch, heads, R C, Q, key_dim) carry 1 / sqrt(d_k);
        # the keys and values (batch, kv_heads, R C, M, dim).
        heads_output, weights = scaled_dot_product_attention(
            merge_blocks(self._query_blocks(queries, rows, cols)),
            merge_blocks(self._memory_blocks(keys, rows, cols)),
            merge_blocks(self._memory_blocks(values, rows, cols)),
            ops.convert_to_tensor(mask)[None, None],
            **self.attention_arguments(None, training),
        )
        # (batch, heads, R, C, Q, M): the documented layout of the scores.
        weights = ops.reshape(
            weights, (batch, self.num_heads, n_r, n_c, h_q * w_q, mem_size)
        )
        # (batch, heads, R, C, h_q, w_q, dv) -> (batch, heads, R, h_q, C, w_q, dv)
        heads_output = ops.reshape(
            heads_output, (batch, self.num_heads, n_r, n_c, h_q, w_q, dim)
        )
        heads_output = ops.transpose(heads_output, (0, 1, 2, 4, 3, 5, 6))
        # (batch, heads, n, value_dim): raster order again.
        heads_output = ops.reshape(
            heads_output, (batch, self.num_heads, rows * cols, dim)
        )
        return self.combine_heads(heads_output), weights

    def blocked_to_dense_scores(self, scores: Any) -> Any:
        """Scatters blocked weights into a dense `(batch, heads, n, n)` tensor.

        Rows and columns are raster-order positions; zero outside each
        query's memory block. Costs `O(batch * heads * n^2)`: for plots and
        tests, not for training.

        Args:
            scores: `(batch, heads, R, C, Q, M)` from the layer.

        Returns:
            float32 `(batch, heads, n, n)`.
        """
        (h_q, w_q), (h_m, w_m) = self.query_block, self.memory_flange
        mem_rows, mem_cols = self.memory_shape
        n_r, n_c = scores.shape[2], scores.shape[3]
        rows, cols = n_r * h_q, n_c * w_q
        length = rows * cols
        batch, width = ops.shape(scores)[0], mem_rows * mem_cols
        positions = np.arange(length)
        r, c = positions // cols, positions % cols
        # The blocked row of each raster position: block, then query slot.
        blocked_row = ((r // h_q) * n_c + c // w_q) * (h_q * w_q) + (
            (r % h_q) * w_q + c % w_q
        )
        # (batch, heads, n, M) in raster order.
        dense_rows = ops.take(
            ops.reshape(scores, (batch, self.num_heads, -1, width)),
            ops.convert_to_tensor(blocked_row.astype("int32")),
            axis=2,
        )
        # (n, n): the memory slot of key t for query p.
        top = (r // h_q) * h_q - h_m
        left = (c // w_q) * w_q - w_m
        slot_r = r[None] - top[:, None]
        slot_c = c[None] - left[:, None]
        inside = (slot_r >= 0) & (slot_r < mem_rows) & (slot_c >= 0)
        inside &= slot_c < mem_cols
        slots = np.where(inside, slot_r * mem_cols + slot_c, 0).astype("int32")
        gathered = ops.take_along_axis(
            dense_rows,
            ops.broadcast_to(
                ops.convert_to_tensor(slots)[None, None],
                (batch, self.num_heads, length, length),
            ),
            axis=-1,
        )
        return ops.where(
            ops.convert_to_tensor(inside)[None, None],
            gathered,
            ops.zeros_like(gathered),
        )

    # ------------------------------------------------------------------ call
    def call(
        self,
        inputs: Any,
        use_causal_mask: bool = False,
        training: bool | None = None,
        cache: tuple[Any, Any] | None = None,
        cache_update_index: Any | None = None,
    ) -> AttentionResult:
        if cache is not None:
            # One position (batch, 1, features): `_attend_cache`.
            return super().call(
                inputs,
                use_causal_mask=use_causal_mask,
                cache=cache,
                cache_update_index=cache_update_index,
            )
        if cache_update_index is not None:
            raise ValueError(
                "`cache_update_index` was given without a cache: pass "
                "cache=layer.empty_cache(batch, rows * cols) too, or neither."
            )
        rows, cols = self._grid(inputs.shape)
        batch = ops.shape(inputs)[0]
        # (batch, n, features): raster order, channels innermost.
        sequence = ops.reshape(inputs, (batch, rows * cols, inputs.shape[-1]))
        # Each (batch, heads, n, dim).
        queries, keys, values = self.project_self_attention(sequence)
        output, scores = self._attend_blocks(
            queries, keys, values, rows, cols, use_causal_mask, training
        )
        # (batch, rows, cols, output_dim)
        output = ops.reshape(output, (batch, rows, cols, self._output_dim))
        return AttentionResult(output, scores)

    # ---------------------------------------------------- cached sampling
    def _attend_cache(self, query: Any, call: CachedCall) -> AttentionResult:
        """The causal output of one position, from the cached earlier positions.

        `call(x_p, cache=(keys, values), cache_update_index=p)`, with `x_p`
        `(batch, 1, features)` the input of raster position `p` (row `p //
        cols`, column `p % cols`) and the cache from `empty_cache(batch,
        rows * cols)`. The keys and values of the position are written into
        the cache at `p`; its query attends to the cached keys of its memory
        block, masked as by `use_causal_mask=True` (itself and the positions
        generated before it only), at a cost of `O(M)`, not `O(n)`. Feeding
        the positions in the generation order (`generation_positions`)
        reproduces `layer(x, use_causal_mask=True)` at every position.
        Sampling feeds each new position the embedding of the intensity just
        drawn (shifted inputs: a position gets the intensity generated
        before it).
        """
        if self.grid_shape is None:
            raise ValueError(
                "LocalAttention2D with a cache needs a built layer: call the "
                "layer once (or `build` it with the image's shape) first."
            )
        check_one_position_cache("LocalAttention2D", query, call)
        rows, cols = self.grid_shape
        (h_q, w_q), (h_m, w_m) = self.query_block, self.memory_flange
        mem_rows, mem_cols = self.memory_shape
        index = ops.cast(call.cache_update_index, "int32")
        # The memory block of the position: (M,) rows and columns.
        top = (index // cols) // h_q * h_q - h_m
        left = (index % cols) // w_q * w_q - w_m
        key_rows = top + ops.convert_to_tensor(
            np.repeat(np.arange(mem_rows), mem_cols).astype("int32")
        )
        key_cols = left + ops.convert_to_tensor(
            np.tile(np.arange(mem_cols), mem_rows).astype("int32")
        )
        slots = ops.clip(key_rows * cols + key_cols, 0, rows * cols - 1)
        # (n,): the generation step of every position.
        steps = ops.convert_to_tensor(self._steps)
        allowed = ops.logical_and(
            ops.logical_and(key_rows >= 0, key_cols >= 0),
            ops.logical_and(
                key_cols < cols, ops.take(steps, slots) <= ops.take(steps, index)
            ),
        )
        return self._attend_cached_slots(query, call.cache, index, slots, allowed)

    # ------------------------------------------------------------ Keras glue
    def build(self, inputs_shape: Sequence[int | None]) -> None:
        rows, cols = self._grid(inputs_shape)
        self.grid_shape = (rows, cols)
        order = generation_positions(
            rows, cols, self.query_block, self.generation_order
        )
        self._steps = np.argsort(order).astype("int32")
        sequence_shape = (inputs_shape[0], rows * cols, inputs_shape[-1])
        super().build(sequence_shape)

    def compute_output_shape(
        self, inputs_shape: Sequence[int | None]
    ) -> tuple[int | None, ...]:
        return (*tuple(inputs_shape[:-1]), self.output_dim or inputs_shape[-1])

    def compute_output_spec(
        self, inputs: Any, cache: tuple[Any, Any] | None = None, **options: Any
    ) -> AttentionResult:
        if cache is not None:
            return super().compute_output_spec(inputs, cache=cache)
        output = keras.KerasTensor(
            self.compute_output_shape(inputs.shape), dtype=self.compute_dtype
        )
        rows, cols = self._grid(inputs.shape)
        (h_q, w_q), (mem_rows, mem_cols) = self.query_block, self.memory_shape
        scores_shape = (
            inputs.shape[0],
            self.num_heads,
            rows // h_q,
            cols // w_q,
            h_q * w_q,
            mem_rows * mem_cols,
        )
        return AttentionResult(output, keras.KerasTensor(scores_shape, "float32"))

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(
            {
                "query_block": list(self.query_block),
                "memory_flange": list(self.memory_flange),
                "generation_order": self.generation_order,
            }
        )
        return config

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> LocalAttention2D:
        # Layers saved before the setting existed were trained in "image" order.
        return super().from_config({"generation_order": "image", **config})

"""One layer of the Image Transformer's decoder (Parmar et al., 2018, §3.2).

Masked self-attention over the image's positions, then the position-wise
feed-forward network, each wrapped in a residual connection, dropout and
layer normalization as in the Transformer (Vaswani et al., 2017, §3.1). The
Image Transformer generates unconditionally (or from a class), so the block
has no encoder-decoder attention. The self-attention is one of three kinds:

- `"full"`: `MultiHeadAttention` with the causal mask over all `n`
  positions in raster order, `O(n^2)`;
- `"local_1d"`: `LocalBlockAttention`, blocks of `l_q` positions in raster
  order attending to themselves and the `l_m` positions before them;
- `"local_2d"`: `LocalAttention2D`, rectangular query blocks with their
  memory flanges (Figure 2), causal in the block's `generation_order`:
  query block after query block (`"blocks"`, the paper's) or one raster
  order over the image (`"image"`).

The query blocks of full and 1D local attention are the whole image and
runs of raster positions, so their block-by-block order is the raster
order: `generation_order` changes only local 2D attention. All three create
the same weights.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import keras
from keras import ops

from keras_transformer.layers._block import TransformerBlockBase
from keras_transformer.layers.attention import MultiHeadAttention
from keras_transformer.layers.attention_settings import AttentionSettings
from keras_transformer.layers.local_attention import LocalBlockAttention
from keras_transformer.layers.local_attention_2d import (
    GENERATION_ORDERS,
    LocalAttention2D,
)
from keras_transformer.validation import (
    check_choice,
    check_grid,
    check_int,
    check_pair,
    check_positive_int,
)

__all__ = ["ATTENTION_TYPES", "ImageTransformerBlock", "check_local_1d"]

#: The self-attention of an Image Transformer layer.
ATTENTION_TYPES = ("full", "local_1d", "local_2d")


def check_local_1d(length: int, query_block_length: int, memory_length: int) -> None:
    """Raises `ValueError` unless 1D query blocks tile `length` positions.

    Args:
        length: the positions of the image, `rows * cols`.
        query_block_length: `l_q`, must divide `length`.
        memory_length: `l_m >= 0`.
    """
    _check_local_1d_arguments(query_block_length, memory_length)
    suggestion = max(
        d for d in range(1, min(length, query_block_length) + 1) if length % d == 0
    )
    if query_block_length > length:
        raise ValueError(
            f"`query_block_length` is larger than the image's {length} positions. "
            f"Received: query_block_length={query_block_length}. Choose "
            f"query_block_length={suggestion}."
        )
    if length % query_block_length:
        padded = -(-length // query_block_length) * query_block_length
        raise ValueError(
            f"The 1D query blocks must tile the image's {length} positions. "
            f"Received: query_block_length={query_block_length}. Pad the image "
            f"to {padded} positions or choose query_block_length={suggestion}."
        )


def check_image_attention(attention: str, settings: AttentionSettings) -> None:
    """Raises `ValueError` for attention settings an image model cannot use.

    The `window` is the text models' restricted attention (an image layer
    chooses its local attention by `attention`). Relative positions (Shaw et
    al., 2018) measure distances in the generation order, one dimension:
    full and local 1D attention take them, local 2D attention (whose memory
    blocks are two-dimensional) does not.
    """
    if settings.window is not None:
        raise ValueError(
            "An image model takes `attention` ('full', 'local_1d', 'local_2d'), "
            "not attention_settings.window. Received: "
            f"attention_settings.window={settings.window}"
        )
    relative_positions = settings.relative_positions
    if attention == "local_2d" and relative_positions is not None:
        raise ValueError(
            "relative_positions works with attention='full' or 'local_1d', not "
            "'local_2d': change one of them. Received: attention='local_2d', "
            f"relative_positions={relative_positions!r}"
        )


def _check_local_1d_arguments(query_block_length: Any, memory_length: Any) -> None:
    check_positive_int("query_block_length", query_block_length)
    check_int("memory_length", memory_length, 0)


@keras.saving.register_keras_serializable(package="keras_transformer")
class ImageTransformerBlock(TransformerBlockBase):
    """Causal local (or full) self-attention and a feed-forward net over a grid.

    Args:
        num_heads, d_ff, key_dim, value_dim, dropout, ffn_dropout,
        activation, norm_first, layer_norm_epsilon, attention_settings,
        kernel_initializer, bias_initializer: as for `EncoderBlock` (the
        settings without a `window`: `attention` chooses the local kind).
        attention: `"full"`, `"local_1d"` or `"local_2d"`.
        query_block, memory_flange: `(h_q, w_q)` and `(h_m, w_m)` of
            `"local_2d"` (see `LocalAttention2D`).
        generation_order: `"blocks"` (query block after query block, §3.2)
            or `"image"` (one raster order over the image): the causal order
            of `"local_2d"` (the other kinds generate in raster order either
            way). A saved block without this setting loads with `"image"`.
        query_block_length, memory_length: `l_q` and `l_m` of `"local_1d"`
            (see `LocalBlockAttention`); `l_q` must divide the positions.
        **kwargs: base layer arguments.

    Call arguments:
        inputs: `(batch, rows, cols, d_model)`, the positions of the image
            (see `ImageEmbedding`), with static `rows` and `cols`; with a
            cache, one position `(batch, 1, d_model)`.
        training: whether dropout is active.
        cache: from `init_cache(batch)` or the previous step: the call is
            then the position `cache_update_index` alone and returns
            `(output, cache)`, equal to that position of the full call once
            the positions before it have been fed in the generation order.
        cache_update_index: with `cache`, the raster position (may be a
            tensor in a compiled loop).

    Returns:
        `(batch, rows, cols, d_model)`; the output at a position depends on
        the inputs at that position and the ones generated before it.

    Example:
    >>> import numpy as np
    >>> block = ImageTransformerBlock(
    ...     num_heads=2, d_ff=32, query_block=(2, 6), memory_flange=(1, 3)
    ... )
    >>> x = np.random.rand(1, 4, 12, 8).astype("float32")
    >>> tuple(block(x).shape)
    (1, 4, 12, 8)

    Sampling one position at a time: `block(x_p, cache=block.init_cache(batch),
    cache_update_index=p)` returns `(output, cache)`
    (`ImageTransformerStack.decode_beam_step` runs it); every kind of
    attention takes its step through its one `call` with a cache.

    Reference: Parmar et al. (2018), "Image Transformer", §3.2; Vaswani et
    al. (2017), §3.1.
    """

    def __init__(
        self,
        num_heads: int,
        d_ff: int,
        attention: str = "local_2d",
        query_block: Sequence[int] = (8, 8),
        memory_flange: Sequence[int] = (8, 8),
        query_block_length: int = 256,
        memory_length: int = 512,
        generation_order: str = "blocks",
        **kwargs: Any,
    ) -> None:
        super().__init__(num_heads=num_heads, d_ff=d_ff, **kwargs)
        check_choice("attention", attention, ATTENTION_TYPES)
        check_image_attention(attention, self.attention_settings)
        self.attention = attention
        self.query_block = check_pair("query_block", query_block, 1)
        self.memory_flange = check_pair("memory_flange", memory_flange, 0)
        _check_local_1d_arguments(query_block_length, memory_length)
        self.query_block_length = query_block_length
        self.memory_length = memory_length
        check_choice("generation_order", generation_order, GENERATION_ORDERS)
        self.generation_order = generation_order
        self.grid_shape: tuple[int, int] | None = None

    # -------------------------------------------------------------- build
    def _grid(self, shape: Sequence[int | None]) -> tuple[int, int, int]:
        if len(shape) != 4 or shape[-1] is None:
            raise ValueError(
                "ImageTransformerBlock expects inputs of shape (batch, rows, "
                "cols, d_model) with a known d_model. Received: "
                f"{tuple(shape)}"
            )
        rows, cols, d_model = shape[1], shape[2], int(shape[-1])
        if self.attention == "local_2d":
            check_grid(rows, cols, self.query_block)
        elif self.attention == "local_1d":
            check_local_1d(rows * cols, self.query_block_length, self.memory_length)
        if self.key_dim is None and d_model % self.num_heads:
            raise ValueError(
                f"d_model={d_model} is not divisible by num_heads="
                f"{self.num_heads}; pass key_dim explicitly or change one of them."
            )
        return int(rows), int(cols), d_model

    def build(self, inputs_shape: Sequence[int | None]) -> None:
        rows, cols, d_model = self._grid(inputs_shape)
        self.grid_shape = (rows, cols)
        sequence_shape = (inputs_shape[0], rows * cols, d_model)
        # Masked self-attention sub-layer.
        common = self._attention_arguments("self_attention", d_model)
        if self.attention == "local_2d":
            self.self_attention = LocalAttention2D(
                query_block=self.query_block,
                memory_flange=self.memory_flange,
                generation_order=self.generation_order,
                **common,
            )
            self.self_attention.build(tuple(inputs_shape))
        elif self.attention == "local_1d":
            self.self_attention = LocalBlockAttention(
                query_block_length=self.query_block_length,
                memory_length=self.memory_length,
                **common,
            )
            self.self_attention.build(sequence_shape)
        else:
            self.self_attention = MultiHeadAttention(**common)
            self.self_attention.build(sequence_shape, sequence_shape)
        self.self_attention_dropout = self._dropout("self_attention_dropout")
        self.self_attention_norm = self._norm("self_attention_norm", sequence_shape)
        # Feed-forward sub-layer.
        self.feed_forward = self._feed_forward()
        self.feed_forward.build(sequence_shape)
        self.feed_forward_dropout = self._dropout("feed_forward_dropout")
        self.feed_forward_norm = self._norm("feed_forward_norm", sequence_shape)
        self.built = True

    # --------------------------------------------------------------- call
    def _attend(self, sequence: Any, training: bool | None) -> Any:
        """Causal self-attention of `(batch, n, d_model)` (raster layout)."""
        rows, cols = self.grid_shape
        if self.attention == "local_2d":
            batch, d_model = ops.shape(sequence)[0], sequence.shape[-1]
            # (batch, rows, cols, d_model)
            grid = ops.reshape(sequence, (batch, rows, cols, d_model))
            output = self.self_attention(
                grid, use_causal_mask=True, training=training
            ).output
            # (batch, n, d_model)
            return ops.reshape(output, (batch, rows * cols, d_model))
        if self.attention == "local_1d":
            return self.self_attention(
                sequence, use_causal_mask=True, training=training
            ).output
        return self.self_attention(
            sequence, sequence, use_causal_mask=True, training=training
        ).output

    def _feed_forward_block(self, outputs: Any, training: bool | None) -> Any:
        return self._sublayer(
            outputs,
            lambda x: self.feed_forward(x, training=training),
            self.feed_forward_norm,
            self.feed_forward_dropout,
            training,
        )

    def call(
        self,
        inputs: Any,
        training: bool | None = None,
        cache: dict[str, Any] | None = None,
        cache_update_index: Any | None = None,
    ) -> Any:
        if cache is not None:
            # One position, (batch, 1, d_model): `(output, cache)`.
            return self._position_step(inputs, cache, cache_update_index)
        if cache_update_index is not None:
            raise ValueError(
                "`cache_update_index` was given without a cache: pass "
                "cache=block.init_cache(batch) too, or neither."
            )
        rows, cols = self.grid_shape
        batch, d_model = ops.shape(inputs)[0], inputs.shape[-1]
        # (batch, n, d_model): raster order.
        sequence = ops.reshape(
            ops.cast(inputs, self.compute_dtype), (batch, rows * cols, d_model)
        )
        # Masked self-attention block.
        outputs = self._sublayer(
            sequence,
            lambda x: self._attend(x, training),
            self.self_attention_norm,
            self.self_attention_dropout,
            training,
        )
        # Feed-forward block.
        outputs = self._feed_forward_block(outputs, training)
        # (batch, rows, cols, d_model)
        return ops.reshape(outputs, (batch, rows, cols, d_model))

    # ----------------------------------------------------- cached sampling
    def init_cache(self, batch_size: Any) -> dict[str, Any]:
        """Zero keys and values of every position, for `call(...,
        cache=...)`.

        Returns:
            `{"keys": (batch, heads, n, key_dim), "values": (batch, heads,
            n, value_dim)}`.
        """
        if self.grid_shape is None:
            raise ValueError(
                "ImageTransformerBlock.init_cache needs a built block: call it "
                "(or the model that holds it) once first."
            )
        rows, cols = self.grid_shape
        keys, values = self.self_attention.empty_cache(batch_size, rows * cols)
        return {"keys": keys, "values": values}

    def _position_step(
        self, position_inputs: Any, cache: dict[str, Any], index: Any
    ) -> tuple[Any, dict[str, Any]]:
        """The block at raster position `index` alone (inference): `call`
        with a cache.

        Args:
            position_inputs: `(batch, 1, d_model)`, the input of position
                `index`.
            cache: from `init_cache` or the previous call.
            index: the raster position (may be a tensor in a compiled loop).

        Returns:
            `(output, cache)`: `(batch, 1, d_model)`, equal to position
            `index` of `call` once the positions generated up to `index`
            have been fed in the generation order, and the cache with the
            position's keys and values.
        """
        new_cache = dict(cache)

        def cached_attend(x: Any) -> Any:
            # Every kind of attention: the one call with a cache.
            output, _, (keys, values) = self.self_attention(
                x,
                cache=(cache["keys"], cache["values"]),
                cache_update_index=index,
                use_causal_mask=True,
            )
            new_cache.update(keys=keys, values=values)
            return output

        outputs = self._sublayer(
            ops.cast(position_inputs, self.compute_dtype),
            cached_attend,
            self.self_attention_norm,
            self.self_attention_dropout,
            False,
        )
        outputs = self._feed_forward_block(outputs, False)
        return outputs, new_cache

    # ---------------------------------------------------------- Keras glue
    def compute_output_shape(
        self, inputs_shape: Sequence[int | None], *args: Any, **kwargs: Any
    ) -> tuple[int | None, ...]:
        return tuple(inputs_shape)

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(
            {
                "attention": self.attention,
                "query_block": list(self.query_block),
                "memory_flange": list(self.memory_flange),
                "query_block_length": self.query_block_length,
                "memory_length": self.memory_length,
                "generation_order": self.generation_order,
            }
        )
        return config

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> ImageTransformerBlock:
        # Blocks saved before the setting existed were trained in "image" order.
        return super().from_config({"generation_order": "image", **config})

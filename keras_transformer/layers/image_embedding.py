"""The inputs of the Image Transformer: intensities, positions, class (§3.1).

An image of `height x width x channels` 8-bit intensities becomes a grid of
`d_model`-vectors in one of two layouts (Parmar et al., 2018, §3.1):

- `positions="channel"` (the categorical output): every intensity is a
  position, the grid has `rows = height` and `cols = width * channels`
  (the channels of a pixel side by side), and each intensity is embedded
  with one of `channels x 256` learned vectors, one table per channel;
- `positions="pixel"` (the DMOL output): every pixel is a position, the grid
  is `height x width`, and a pixel is the linear map of its `channels`
  intensities as real numbers in [-1, 1] (`v / 127.5 - 1`, the scale of
  the DMOL output): the paper's "1x3 window, 1x3 strided convolution" over
  the channels, as the DMOL models of the Image Transformer's code base
  embed pixels.

The intensity embeddings are multiplied by `sqrt(d_model)` (Vaswani et al.,
§3.4). The result is **shifted right by one position in the generation
order**: each position holds the embedding of the position generated just
before it, the first position a zero vector, so that a causal stack never
sees the value it predicts. With `query_block` the order is the paper's
(§3.2: query block after query block in raster order, raster order inside
each block, `generation_positions`); without it, one raster order over the
whole image (position `p` holds `p - 1`). Either way the grid stays in the
image's layout: only which value lands at which position follows the order.
A position encoding is added: sinusoids (Eqs. 5-6) of the row on the first `d_model / 2`
dimensions and of the column on the other half (§3.1: "d/2 of the
dimensions to encode the row number and the other d/2 to encode the column
and the color channel"), and, with `num_classes`, a learned class embedding
at every position (§4, class-conditional generation).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import keras
import numpy as np
from keras import ops

from keras_transformer.backend import known_values, linear
from keras_transformer.layers.local_attention_2d import generation_positions
from keras_transformer.layers.pixel_outputs import NUM_INTENSITIES, check_pixels
from keras_transformer.layers.position import sinusoidal_encoding
from keras_transformer.validation import (
    check_choice,
    check_grid,
    check_pair,
    check_positive_int,
)

__all__ = [
    "IMAGE_POSITIONS",
    "ImageEmbedding",
    "check_image_d_model",
    "grid_position_encoding",
    "position_grid_shape",
]

#: The two layouts of positions: one per intensity, or one per pixel.
IMAGE_POSITIONS = ("channel", "pixel")


def position_grid_shape(
    image_shape: tuple[int, int, int], positions: str
) -> tuple[int, int]:
    """`(rows, cols)` of the positions of an image of `(height, width, channels)`.

    Channel-wise positions (Parmar et al. 2018, §3.1: one per intensity) lay
    the channels of a pixel side by side, `(height, width * channels)`;
    pixel positions give `(height, width)`.
    """
    height, width, channels = image_shape
    if positions == "channel":
        return height, width * channels
    return height, width


def grid_position_encoding(rows: int, cols: int, depth: int) -> Any:
    """Sinusoids of the row on `depth / 2` dimensions, of the column on the rest.

    Args:
        rows, cols: the grid (with channel-wise positions `cols` counts
            every channel of every pixel).
        depth: `d_model`, a multiple of 4.

    Returns:
        float32 `(rows, cols, depth)`.

    Reference: Parmar et al. (2018), §3.1; Vaswani et al. (2017), Eqs. 5-6.
    """
    if depth % 4:
        raise ValueError(
            "The 2D position encoding splits `d_model` into two halves of "
            f"sines and cosines: it must be a multiple of 4. Received: d_model={depth}"
        )
    half = depth // 2
    # (rows, half) and (cols, half)
    row_codes = sinusoidal_encoding(ops.arange(rows), half)
    col_codes = sinusoidal_encoding(ops.arange(cols), half)
    return ops.concatenate(
        [
            ops.broadcast_to(row_codes[:, None, :], (rows, cols, half)),
            ops.broadcast_to(col_codes[None, :, :], (rows, cols, half)),
        ],
        axis=-1,
    )


def check_image_d_model(d_model: Any) -> None:
    """Raises `ValueError` unless `d_model` is a positive multiple of 4."""
    check_positive_int("d_model", d_model)
    if d_model % 4:
        raise ValueError(
            "`d_model` must be a multiple of 4 (the 2D position encoding "
            f"gives half of it to the row, half to the column). Received: "
            f"d_model={d_model}. Choose d_model={max(4, d_model // 4 * 4)}."
        )


def check_image_shape(image_shape: Any) -> tuple[int, int, int]:
    """`image_shape` as ``(height, width, channels)`` of positive integers;
    a `ValueError` naming it otherwise."""
    message = (
        "`image_shape` must be three positive integers (height, width, "
        f"channels). Received: image_shape={image_shape!r}"
    )
    if not isinstance(image_shape, (tuple, list)) or len(image_shape) != 3:
        raise ValueError(message)
    for size in image_shape:
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)):
            raise ValueError(message)
        if size <= 0:
            raise ValueError(message)
    return int(image_shape[0]), int(image_shape[1]), int(image_shape[2])


@keras.saving.register_keras_serializable(package="keras_transformer")
class ImageEmbedding(keras.layers.Layer):
    """Embeds an image as a grid of positions, shifted by one generation step.

    Args:
        image_shape: `(height, width, channels)`.
        d_model: the model size, a multiple of 4 (two halves of 2D sinusoids).
        positions: `"channel"` (one position per intensity: a grid of
            `height x width * channels`) or `"pixel"` (one per pixel:
            `height x width`).
        num_classes: the number of classes of class-conditional generation,
            or `None`.
        query_block: `(h_q, w_q)` in positions: the positions are generated
            query block after query block (§3.2, the order of
            `LocalAttention2D(generation_order="blocks")` with these blocks),
            so that is the order of the shift; `None` (and a saved layer
            without this setting): one raster order over the whole image.
        embeddings_initializer: initializer of the intensity (`"channel"`)
            and class tables (the embeddings are multiplied by
            `sqrt(d_model)`).
        kernel_initializer: initializer of the pixel map (`"pixel"`): the
            map of the `channels` scaled intensities to `d_model`, which
            starts with unit variance (a normal of standard deviation
            `sqrt(3 / channels)` on values of variance about 1/3) when
            `None`.
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Call arguments:
        images: integer `(batch, height, width, channels)` in `[0, 255]`.
        labels: integer `(batch,)` classes, with `num_classes` only.

    Returns:
        `(batch, rows, cols, d_model)`: each position holds the embedding of
        the intensity (or pixel) generated just before it (raster order:
        `p - 1`) plus the encoding of its own row and column and the class
        embedding; position 0, the first generated, holds no intensity.

    Example:
    >>> import numpy as np
    >>> layer = ImageEmbedding(image_shape=(4, 4, 3), d_model=8)
    >>> images = np.random.randint(0, 256, (2, 4, 4, 3))
    >>> tuple(layer(images).shape)  # channel-wise: 4 rows x 12 columns
    (2, 4, 12, 8)

    Reference: Parmar et al. (2018), "Image Transformer", §3.1 and §4.
    """

    def __init__(
        self,
        image_shape: Sequence[int],
        d_model: int,
        positions: str = "channel",
        num_classes: int | None = None,
        query_block: Sequence[int] | None = None,
        embeddings_initializer: str | keras.initializers.Initializer | None = None,
        kernel_initializer: str | keras.initializers.Initializer | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.image_shape = check_image_shape(image_shape)
        check_image_d_model(d_model)
        check_choice("positions", positions, IMAGE_POSITIONS)
        if num_classes is not None:
            check_positive_int("num_classes", num_classes)
        self.d_model = d_model
        self.positions = positions
        self.num_classes = num_classes
        self.query_block = None
        if query_block is not None:
            self.query_block = check_pair("query_block", query_block, 1)
            check_grid(*self.grid_shape, self.query_block)
        self.embeddings_initializer = keras.initializers.get(
            embeddings_initializer
            or keras.initializers.RandomNormal(stddev=d_model**-0.5)
        )
        self.kernel_initializer = keras.initializers.get(
            kernel_initializer
            or keras.initializers.RandomNormal(
                stddev=math.sqrt(3.0 / self.image_shape[2])
            )
        )

    # ------------------------------------------------------------ geometry
    @property
    def grid_shape(self) -> tuple[int, int]:
        """`(rows, cols)` of the positions (`position_grid_shape`)."""
        return position_grid_shape(self.image_shape, self.positions)

    @property
    def num_positions(self) -> int:
        """`rows * cols`."""
        return math.prod(self.grid_shape)

    @property
    def generation_positions(self) -> np.ndarray:
        """`(n,)`: the raster positions in the order they are generated."""
        return generation_positions(*self.grid_shape, self.query_block)

    def _predecessors(self) -> np.ndarray:
        """`(n,)` int32: the raster position generated before each one, -1
        before the first."""
        order = self.generation_positions
        predecessors = np.empty_like(order)
        predecessors[order] = np.concatenate([[-1], order[:-1]])
        return predecessors.astype("int32")

    # --------------------------------------------------------------- build
    def build(self, images_shape: Any = None, labels_shape: Any = None) -> None:
        channels = self.image_shape[2]
        if self.positions == "channel":
            # One table of 256 intensities per channel: (channels * 256, d_model).
            self.intensity_embeddings = self.add_weight(
                name="intensity_embeddings",
                shape=(channels * NUM_INTENSITIES, self.d_model),
                initializer=self.embeddings_initializer,
            )
        else:
            # The 1x3 strided convolution: (channels, d_model).
            self.pixel_kernel = self.add_weight(
                name="pixel_kernel",
                shape=(channels, self.d_model),
                initializer=self.kernel_initializer,
            )
            self.pixel_bias = self.add_weight(
                name="pixel_bias", shape=(self.d_model,), initializer="zeros"
            )
        if self.num_classes is not None:
            self.class_embeddings = self.add_weight(
                name="class_embeddings",
                shape=(self.num_classes, self.d_model),
                initializer=self.embeddings_initializer,
            )
        self.built = True

    # ---------------------------------------------------------- embedding
    def _embed_values(self, values: Any) -> Any:
        """Integer `(..., channels)` pixels -> `(..., channels, d_model)`."""
        channels = self.image_shape[2]
        offsets = ops.arange(channels, dtype="int32") * NUM_INTENSITIES
        ids = ops.cast(values, "int32") + offsets
        embedded = ops.take(
            ops.cast(self.intensity_embeddings, self.compute_dtype), ids, axis=0
        )
        return embedded * ops.cast(math.sqrt(self.d_model), self.compute_dtype)

    def _embed_pixels(self, pixels: Any) -> Any:
        """Integer `(..., channels)` -> `(..., d_model)`: the pixel map of the
        intensities scaled to [-1, 1]."""
        scaled = ops.cast(pixels, self.compute_dtype) / 127.5 - 1.0
        return linear(scaled, self.pixel_kernel, self.pixel_bias)

    def _conditioning(self, labels: Any) -> Any | None:
        """`(batch, 1, 1, d_model)` class embeddings, or None."""
        if self.num_classes is None:
            if labels is not None:
                raise ValueError(
                    "`labels` were given to a model without classes. Build it "
                    "with num_classes=<number of classes> or leave labels out."
                )
            return None
        if labels is None:
            raise ValueError(
                f"This model is class-conditional (num_classes={self.num_classes}): "
                "pass `labels`, integer (batch,) classes."
            )
        _check_labels(labels, self.num_classes)
        labels = ops.reshape(ops.cast(labels, "int32"), (-1,))
        table = ops.cast(self.class_embeddings, self.compute_dtype)
        scale = ops.cast(math.sqrt(self.d_model), self.compute_dtype)
        return (ops.take(table, labels, axis=0) * scale)[:, None, None, :]

    def call(self, images: Any, labels: Any | None = None) -> Any:
        height, width, channels = self.image_shape
        _check_images(images, self.image_shape)
        rows, cols = self.grid_shape
        batch = ops.shape(images)[0]
        if self.positions == "channel":
            # (batch, height, width, channels, d_model)
            embedded = self._embed_values(images)
        else:
            # (batch, height, width, d_model)
            embedded = self._embed_pixels(images)
        # (batch, n, d_model) in raster order, channels innermost.
        sequence = ops.reshape(embedded, (batch, rows * cols, self.d_model))
        if self.query_block is None:
            # Shift right by one raster position: p holds p - 1, 0 holds zeros.
            sequence = ops.pad(sequence[:, :-1], [[0, 0], [1, 0], [0, 0]])
        else:
            # Each position takes its predecessor in the generation order;
            # index 0 of the padded sequence is the zeros of the first one.
            sequence = ops.take(
                ops.pad(sequence, [[0, 0], [1, 0], [0, 0]]),
                ops.convert_to_tensor(self._predecessors() + 1),
                axis=1,
            )
        # (batch, rows, cols, d_model)
        grid = ops.reshape(sequence, (batch, rows, cols, self.d_model))
        grid = (
            grid
            + ops.cast(
                grid_position_encoding(rows, cols, self.d_model), self.compute_dtype
            )[None]
        )
        conditioning = self._conditioning(labels)
        if conditioning is not None:
            grid = grid + conditioning
        return grid

    def embed_step(self, previous: Any, index: Any, labels: Any | None = None) -> Any:
        """The input of raster position `index` alone, for cached sampling.

        Args:
            previous: the value at the position generated just before
                `index` (`index - 1` in raster order): integer `(batch,)`
                intensities with `positions="channel"` (of that position's
                channel), `(batch, channels)` pixels with `"pixel"`; ignored
                at `index = 0`, the first position generated.
            index: the raster position (a Python or scalar tensor integer).
            labels: integer `(batch,)` classes, with `num_classes`.

        Returns:
            `(batch, 1, d_model)`, equal to position `index` of `call` on
            any image whose position generated before `index` holds
            `previous`.
        """
        rows, cols = self.grid_shape
        channels = self.image_shape[2]
        index = ops.cast(index, "int32")
        if self.positions == "channel":
            # The channel of the position generated before `index`.
            previous = ops.reshape(ops.cast(previous, "int32"), (-1,))
            predecessor = ops.take(ops.convert_to_tensor(self._predecessors()), index)
            channel = ops.maximum(predecessor, 0) % cols % channels
            ids = previous + channel * NUM_INTENSITIES
            table = ops.cast(self.intensity_embeddings, self.compute_dtype)
            embedded = ops.take(table, ids, axis=0) * ops.cast(
                math.sqrt(self.d_model), self.compute_dtype
            )
        else:
            embedded = self._embed_pixels(previous)
        # (batch, d_model): nothing before the first position.
        embedded = embedded * ops.cast(index > 0, self.compute_dtype)
        row, col = index // cols, index % cols
        # (d_model,): the 2D encoding of (row, col).
        half = self.d_model // 2
        code = ops.concatenate(
            [
                sinusoidal_encoding(ops.reshape(row, (1,)), half)[0],
                sinusoidal_encoding(ops.reshape(col, (1,)), half)[0],
            ],
            axis=0,
        )
        step = embedded + ops.cast(code, self.compute_dtype)[None]
        conditioning = self._conditioning(labels)
        if conditioning is not None:
            step = step + conditioning[:, 0, 0]
        return step[:, None, :]

    # ---------------------------------------------------------- Keras glue
    def compute_output_shape(
        self, images_shape: Sequence[int | None], labels_shape: Any = None
    ) -> tuple[int | None, ...]:
        return (images_shape[0], *self.grid_shape, self.d_model)

    def compute_output_spec(self, images: Any, labels: Any | None = None) -> Any:
        return keras.KerasTensor(
            self.compute_output_shape(images.shape), dtype=self.compute_dtype
        )

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(
            {
                "image_shape": list(self.image_shape),
                "d_model": self.d_model,
                "positions": self.positions,
                "num_classes": self.num_classes,
                "query_block": None
                if self.query_block is None
                else list(self.query_block),
                "embeddings_initializer": keras.initializers.serialize(
                    self.embeddings_initializer
                ),
                "kernel_initializer": keras.initializers.serialize(
                    self.kernel_initializer
                ),
            }
        )
        return config


# ------------------------------------------------------------------ checks
def _check_images(images: Any, image_shape: tuple[int, int, int]) -> None:
    """Integer `(batch, height, width, channels)` intensities in [0, 255]."""
    shape = tuple(images.shape)
    if len(shape) != 4 or any(
        size is not None and size != expected
        for size, expected in zip(shape[1:], image_shape, strict=True)
    ):
        raise ValueError(
            "`images` must be (batch, height, width, channels) = (batch, "
            f"{', '.join(map(str, image_shape))}). Received: images.shape={shape}. "
            "Crop or pad the images to the model's image_shape, or build the "
            f"model with image_shape={tuple(shape[1:]) if len(shape) == 4 else '...'}."
        )
    check_pixels("images", images)


def _check_labels(labels: Any, num_classes: int) -> None:
    if not hasattr(labels, "dtype"):
        labels = np.asarray(labels)
    dtype = keras.backend.standardize_dtype(labels.dtype)
    if "int" not in dtype:
        raise ValueError(
            f"`labels` must be integer classes in [0, {num_classes}). Received: "
            f"labels.dtype={dtype}"
        )
    values = known_values(labels)
    if (
        values is not None
        and values.size
        and (values.min() < 0 or values.max() >= num_classes)
    ):
        raise ValueError(
            f"`labels` must be classes in [0, {num_classes}). Received values "
            f"from {values.min()} to {values.max()}."
        )

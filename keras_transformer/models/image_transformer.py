"""The Image Transformer as a functional Keras model (Parmar et al., 2018).

A decoder-only Transformer over the intensities of an image, generated in
the order of `ImageTransformerConfig.generation_order` (query block after
query block, §3.2, or one raster order over the image):

    images -> ImageEmbedding (shifted by one generation step, 2D sinusoids,
              class)
           -> dropout -> N x ImageTransformerBlock (causal full / local 1D /
              local 2D self-attention, feed-forward) -> [final LayerNorm]
           -> CategoricalPixelHead or DiscretizedLogisticMixtureHead

`ImageTransformerStack` holds the named layers and runs them: `forward`
(the whole image at once, what `build_image_transformer` wires) and
`init_cache` / `decode_beam_step` (one position at a time, the text stack's
step protocol, what sampling runs through the decoding package's search). Every
tensor keeps the image's layout, whatever the order, so outputs, losses and
bits/dim compare each pixel with its own distribution. Written
with `keras` and `keras.ops` only: it runs on every Keras backend.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import keras
from keras import ops

from keras_transformer.layers import Dropout, LayerNormalization
from keras_transformer.layers.image_block import ImageTransformerBlock
from keras_transformer.layers.image_embedding import ImageEmbedding
from keras_transformer.layers.pixel_outputs import (
    NUM_INTENSITIES,
    CategoricalPixelHead,
    DiscretizedLogisticMixtureHead,
    check_pixels,
)
from keras_transformer.models.image_config import ImageTransformerConfig
from keras_transformer.validation import check_positive_int

__all__ = ["ImageTransformerStack", "build_image_transformer", "image_bits_per_dim"]

#: The `ImageTransformerBlock` arguments read from config fields of the same name.
_BLOCK_SETTINGS = (
    "num_heads",
    "d_ff",
    "attention",
    "query_block",
    "memory_flange",
    "query_block_length",
    "memory_length",
    "generation_order",
    "dropout",
    "ffn_dropout",
    "activation",
    "norm_first",
    "layer_norm_epsilon",
    "attention_settings",
)

#: Caches of the blocks, one `ImageTransformerBlock.init_cache` dict each.
BlockCaches = list[dict[str, Any]]


@dataclasses.dataclass
class ImageTransformerStack:
    """The named layers of a model from `build_image_transformer`, and its passes.

    Created by `build_image_transformer`, or found again by name in a built
    (or loaded) model with `ImageTransformerStack.of(model)`.

    - `forward(images, labels)`: the distribution of every intensity given
      the earlier ones (teacher forcing), `(batch, height, width, channels,
      256)` logits or `(batch, height, width, P)` DMOL parameters;
    - `init_cache(batch)` and `decode_beam_step(token_ids, caches, index)`:
      the same for one position at a time in `generation_positions` order,
      with key/value caches (sampling, `keras_transformer.decoding`);
    - `bits_per_dim(outputs, images)` and `sample(outputs, temperature)`:
      the head's negative log-likelihood and its draws.

    Example:
    >>> import numpy as np, keras_transformer as kt
    >>> config = kt.models.ImageTransformerConfig(
    ...     image_shape=(4, 4, 3), output="categorical", num_layers=1,
    ...     d_model=16, d_ff=32, num_heads=2, query_block=(2, 6),
    ...     memory_flange=(1, 3))
    >>> model = kt.models.build_image_transformer(config)
    >>> stack = ImageTransformerStack.of(model)
    >>> images = np.random.randint(0, 256, (2, 4, 4, 3))
    >>> tuple(stack.forward(images).shape)
    (2, 4, 4, 3, 256)

    Reference: Parmar et al. (2018), "Image Transformer", §3.
    """

    embedding: ImageEmbedding
    dropout: keras.layers.Layer
    blocks: list[ImageTransformerBlock]
    final_norm: keras.layers.Layer | None
    head: keras.layers.Layer

    @classmethod
    def create(
        cls, config: ImageTransformerConfig, dtype: Any = None
    ) -> ImageTransformerStack:
        """New layers for `config` (what `build_image_transformer` wires)."""
        embedding = ImageEmbedding(
            image_shape=config.image_shape,
            d_model=config.d_model,
            positions=config.positions,
            num_classes=config.num_classes,
            query_block=config.generation_query_block,
            dtype=dtype,
            name="image_embedding",
        )
        # The block's arguments that are config fields of the same name.
        block_settings = {name: getattr(config, name) for name in _BLOCK_SETTINGS}
        blocks = [
            ImageTransformerBlock(
                key_dim=config.head_key_dim,
                dtype=dtype,
                name=f"image_block_{i}",
                **block_settings,
            )
            for i in range(config.num_layers)
        ]
        final_norm = None
        if config.norm_first:
            final_norm = LayerNormalization(
                epsilon=config.layer_norm_epsilon, dtype=dtype, name="final_norm"
            )
        if config.output == "categorical":
            head = CategoricalPixelHead(dtype=dtype, name="pixel_head")
        else:
            head = DiscretizedLogisticMixtureHead(
                num_mixtures=config.num_mixtures,
                channels=config.image_shape[2],
                dtype=dtype,
                name="pixel_head",
            )
        return cls(
            embedding=embedding,
            dropout=Dropout(config.dropout, dtype=dtype, name="embedding_dropout"),
            blocks=blocks,
            final_norm=final_norm,
            head=head,
        )

    @classmethod
    def of(cls, model: keras.Model) -> ImageTransformerStack:
        """Finds the layers of a model built by `build_image_transformer`."""
        names = {layer.name: layer for layer in model.layers}
        if "image_embedding" not in names or "pixel_head" not in names:
            raise ValueError(
                f"Model {model.name!r} was not built by build_image_transformer: "
                "it has no 'image_embedding' or 'pixel_head' layer."
            )
        blocks = []
        while f"image_block_{len(blocks)}" in names:
            blocks.append(names[f"image_block_{len(blocks)}"])
        return cls(
            embedding=names["image_embedding"],
            dropout=names["embedding_dropout"],
            blocks=blocks,
            final_norm=names.get("final_norm"),
            head=names["pixel_head"],
        )

    # ------------------------------------------------------------ geometry
    @property
    def image_shape(self) -> tuple[int, int, int]:
        return self.embedding.image_shape

    @property
    def categorical(self) -> bool:
        """Whether the output is the 256-way softmax (channel-wise positions)."""
        return isinstance(self.head, CategoricalPixelHead)

    @property
    def grid_shape(self) -> tuple[int, int]:
        """`(rows, cols)` of the positions."""
        return self.embedding.grid_shape

    @property
    def num_positions(self) -> int:
        return self.embedding.num_positions

    @property
    def generation_positions(self) -> Any:
        """`(n,)`: the raster positions in the order the model generates them."""
        return self.embedding.generation_positions

    @property
    def generation_query_block(self) -> tuple[int, int] | None:
        """The query blocks that order the generation, or `None` (raster order)."""
        return self.embedding.query_block

    # -------------------------------------------------------- full pass
    def forward(
        self, images: Any, labels: Any | None = None, training: bool | None = None
    ) -> Any:
        """The output distribution of every intensity given the earlier ones.

        Args:
            images: integer `(batch, height, width, channels)` in [0, 255].
            labels: integer `(batch,)` classes (class-conditional models).
            training: whether dropout is active.

        Returns:
            float32 logits `(batch, height, width, channels, 256)`
            (categorical) or DMOL parameters `(batch, height, width, P)`.
        """
        x = self.embedding(images, labels)
        x = self.dropout(x, training=training)
        for block in self.blocks:
            x = block(x, training=training)
        if self.final_norm is not None:
            x = self.final_norm(x)
        # (batch, rows, cols, 256) or (batch, height, width, P)
        outputs = ops.cast(self.head(x), "float32")
        if self.categorical:
            height, width, channels = self.image_shape
            # (batch, height, width, channels, 256)
            outputs = ops.reshape(
                outputs, (-1, height, width, channels, NUM_INTENSITIES)
            )
        return outputs

    # --------------------------------------------------- one position at a time
    def init_cache(self, batch_size: Any) -> BlockCaches:
        """Empty key/value caches of every block, for `decode_beam_step`
        (one slot per position: the beam-slot layout with one hypothesis)."""
        return [block.init_cache(batch_size) for block in self.blocks]

    def decode_beam_step(
        self,
        token_ids: Any,
        caches: BlockCaches,
        index: Any,
        labels: Any | None = None,
    ) -> tuple[Any, BlockCaches]:
        """The output distribution of raster position `index` alone.

        The text stack's step (`TransformerStack.decode_beam_step`) for a
        decoder-only model: the value generated before `index` in, the
        distribution of `index` out, the caches updated. Positions must be
        fed in the order of `generation_positions` (raster order, `0, 1,
        ..., n - 1`, for `generation_order="image"`): each step writes its
        keys and values into the caches that later steps read. One
        hypothesis per example (`beam = 1`: image caches hold one slot per
        position), what greedy decoding and sampling run.

        Args:
            token_ids: the value of the position generated before `index`
                (ignored at 0): integer `(batch, 1)` intensities
                (categorical, that position's channel) or `(batch, 1,
                channels)` pixels (DMOL).
            caches: from `init_cache` or the previous step.
            index: the raster position (may be a tensor in a compiled loop).
            labels: integer `(batch,)` classes (class-conditional models).

        Returns:
            `(outputs, caches)`: float32 `(batch, 1, 256)` logits or `(batch,
            1, P)` DMOL parameters, equal to position `index` of `forward`,
            and the updated caches.

        Reference: Parmar et al. (2018), "Image Transformer", §3.2 and §5.
        """
        beam = token_ids.shape[1]
        if beam != 1:
            raise ValueError(
                "ImageTransformerStack.decode_beam_step runs one hypothesis per "
                "image (caches with one slot per position): pass token_ids of "
                f"shape (batch, 1{'' if self.categorical else ', channels'}). "
                f"Received: token_ids.shape={tuple(token_ids.shape)}"
            )
        x = self.embedding.embed_step(token_ids[:, 0], index, labels)
        new_caches = []
        for block, cache in zip(self.blocks, caches, strict=True):
            x, cache = block.call(x, cache=cache, cache_update_index=index)
            new_caches.append(cache)
        if self.final_norm is not None:
            x = self.final_norm(x)
        return ops.cast(self.head(x), "float32"), new_caches

    # ----------------------------------------------------------- the head
    def bits_per_dim(self, outputs: Any, images: Any) -> Any:
        """The mean negative log-likelihood of `images` in bits per intensity.

        Args:
            outputs: from `forward`.
            images: integer `(batch, height, width, channels)`.
        """
        check_pixels("images", images)
        return self.head.bits_per_dim(outputs, images)

    def sample(self, outputs: Any, temperature: float = 1.0, seed: Any = None) -> Any:
        """Draws values from `outputs` with a temperature (0: the mode).

        Returns:
            int32 intensities: `outputs.shape[:-1]` (categorical) or
            `outputs.shape[:-1] + (channels,)` (DMOL).
        """
        return self.head.sample(outputs, temperature=temperature, seed=seed)


def build_image_transformer(
    config: ImageTransformerConfig, dtype: Any = None
) -> keras.Model:
    """Builds the Image Transformer as a functional `keras.Model`.

    Inputs: `images`, int32 `(batch, height, width, channels)` intensities
    in [0, 255], and, for a class-conditional config, `labels`, int32
    `(batch,)`. Output: float32 logits `(batch, height, width, channels,
    256)` (categorical) or DMOL parameters `(batch, height, width, K (1 + 2C
    + C(C-1)/2))`, in the image's layout. The output at an intensity
    depends only on the intensities generated before it
    (`config.generation_order`; channels innermost): the inputs are shifted
    by one generation step inside the model, so the model is trained with
    the images as both input and target.

    Args:
        config: the hyperparameters.
        dtype: a Keras dtype policy for every layer (e.g. `"mixed_bfloat16"`);
            the outputs stay float32.

    Returns:
        the model, named `"image_transformer"`.

    Example:
    >>> import numpy as np, keras_transformer as kt
    >>> config = kt.models.ImageTransformerConfig(
    ...     image_shape=(8, 8, 3), num_layers=1, d_model=16, d_ff=32,
    ...     num_heads=2, num_mixtures=2, query_block=(4, 4),
    ...     memory_flange=(2, 2))
    >>> model = kt.models.build_image_transformer(config)
    >>> tuple(model(np.zeros((1, 8, 8, 3), "int32")).shape)
    (1, 8, 8, 20)

    Reference: Parmar et al. (2018), "Image Transformer", §3 and §4.
    """
    if not isinstance(config, ImageTransformerConfig):
        raise TypeError(
            "`config` must be an ImageTransformerConfig. Received: "
            f"{type(config).__name__}"
        )
    stack = ImageTransformerStack.create(config, dtype=dtype)
    images = keras.Input(shape=config.image_shape, dtype="int32", name="images")
    inputs: Any = images
    labels = None
    if config.num_classes is not None:
        labels = keras.Input(shape=(), dtype="int32", name="labels")
        inputs = {"images": images, "labels": labels}
    outputs = stack.forward(images, labels)
    return keras.Model(inputs, outputs, name="image_transformer")


def image_bits_per_dim(
    model: keras.Model,
    images: Any,
    labels: Any | None = None,
    batch_size: int = 32,
) -> float:
    """The model's negative log-likelihood of `images` in bits per dimension.

    `-(1 / N) sum_i log2 p(x_i | x_<i)` over the `N` intensities of all the
    images (every channel of every pixel is a dimension), the measure of
    the paper's Tables 1-3.

    Args:
        model: from `build_image_transformer`.
        images: integer `(n, height, width, channels)` in [0, 255].
        labels: integer `(n,)` classes, for class-conditional models.
        batch_size: images per forward pass.

    Returns:
        bits per dimension, a Python float.

    Reference: Parmar et al. (2018), "Image Transformer", §5 (bits/dim).
    """
    check_pixels("images", images)
    check_positive_int("batch_size", batch_size)
    stack = ImageTransformerStack.of(model)
    total, count = 0.0, 0
    for start in range(0, len(images), batch_size):
        batch = images[start : start + batch_size]
        batch_labels = None if labels is None else labels[start : start + batch_size]
        outputs = stack.forward(batch, batch_labels, training=False)
        bits = float(ops.convert_to_numpy(stack.bits_per_dim(outputs, batch)))
        total += bits * len(batch)
        count += len(batch)
    if not count:
        raise ValueError("`images` is empty: there is nothing to evaluate.")
    return total / count

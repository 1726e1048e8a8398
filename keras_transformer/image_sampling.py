"""Sampling and completing images with the Image Transformer (§5, Figure 1).

`complete_images(model, images, given_rows)` keeps the top `given_rows`
rows of each image and draws the rest, one intensity at a time in the
model's generation order (§3.2: query block after query block in raster
order, raster order inside each block; or one raster order over the image
for `generation_order="image"`), each from the model's distribution given
everything generated before it, at a `temperature`. In the block order the
given rows must be whole rows of query blocks (a multiple of the query
block's height), so that they are exactly the first positions generated.

This module is the public front; the work is the decoding package's: one
search (`decoding.search.run_search`, the loop of text decoding) with one
hypothesis per image over the model's cached step
(`ImageTransformerStack.decode_beam_step`, `decoding/images.py`), the given
rows as the search's forced prefix. Every position costs one pass through
the blocks for that position alone, attending to the cached keys and
values of its memory block; the given rows go through the same loop, which
fills the caches, but their values are forced, never drawn.

`temperature = 1` samples the model (every intensity from its exact
distribution given the earlier ones: for DMOL, each channel given the
channels drawn before it); other values draw from `softmax(log p / T)`,
smaller ones sharpening every distribution; `temperature = 0` takes the most
likely value at each step (greedy).
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
import tensorflow as tf

from keras_transformer.data.images import check_image_batch
from keras_transformer.decoding.images import sample_intensities
from keras_transformer.layers.pixel_outputs import check_temperature
from keras_transformer.models.image_transformer import ImageTransformerStack
from keras_transformer.validation import check_int, check_positive_int

__all__ = ["ImageSampler", "complete_images", "sample_images"]


class ImageSampler:
    """Completes images from their top rows with a model's cached step.

    One compiled search is kept per kind of call (sampling or greedy,
    with or without labels); the given rows, temperature and seed are its
    arguments, so repeated calls do not trace again.

    Args:
        model: a model from `build_image_transformer` (or loaded).
        jit_compile: compile the search with XLA.

    Example:
    >>> sampler = ImageSampler(model)  # doctest: +SKIP
    >>> completed = sampler.complete(images, 16, 1.0)  # doctest: +SKIP

    Reference: Parmar et al. (2018), "Image Transformer", §5 (image
    completion, Figure 1).
    """

    def __init__(self, model: keras.Model, jit_compile: bool = False) -> None:
        self.model = model
        self.stack = ImageTransformerStack.of(model)
        self.jit_compile = jit_compile
        self._searches: dict[tuple[bool, bool], Any] = {}
        self._seeds = np.random.default_rng(0)

    @property
    def image_shape(self) -> tuple[int, int, int]:
        return self.stack.image_shape

    @property
    def generation_positions(self) -> np.ndarray:
        """`(n,)`: the raster positions in the order the search writes them."""
        return np.asarray(self.stack.generation_positions)

    def _search(self, greedy: bool, conditional: bool) -> Any:
        """The compiled `sample_intensities` of this kind of call."""
        key = (greedy, conditional)
        if key not in self._searches:
            stack = self.stack

            def search(given, given_length, temperature, seed, labels):  # noqa: ANN001, ANN202
                return sample_intensities(
                    stack,
                    given,
                    given_length,
                    temperature,
                    seed,
                    labels if conditional else None,
                    greedy=greedy,
                    jit_compile=self.jit_compile,
                )

            self._searches[key] = tf.function(
                search,
                jit_compile=self.jit_compile,
                reduce_retracing=True,
                autograph=False,
            )
        return self._searches[key]

    def _check_whole_block_rows(self, given_rows: int) -> None:
        """In the block order the given rows must be the first generated."""
        blocks = self.stack.generation_query_block
        if blocks is None or given_rows % blocks[0] == 0:
            return
        h_q, height = blocks[0], self.image_shape[0]
        below, above = given_rows // h_q * h_q, min(-(-given_rows // h_q) * h_q, height)
        raise ValueError(
            "The model generates query block after query block (generation_order="
            f"'blocks', query_block={blocks}): `given_rows` must be whole rows of "
            f"query blocks, a multiple of {h_q}, so that the given rows come "
            f"first. Received: given_rows={given_rows}. Pass given_rows={below} "
            f"or {above}."
        )

    def complete(
        self,
        images: Any,
        given_rows: int,
        temperature: float = 1.0,
        seed: int | None = None,
        labels: Any | None = None,
    ) -> np.ndarray:
        """Keeps the top `given_rows` rows of `images` and samples the rest.

        Args:
            images: integer `(batch, height, width, channels)` in [0, 255];
                only the top `given_rows` rows are read.
            given_rows: how many rows are given, `0 <= given_rows <= height`
                (0: sample whole images); in the block order a multiple of
                the query block's height (whole rows of query blocks).
            temperature: `T >= 0`: 1 samples the model, 0 takes the most
                likely value at every step.
            seed: an integer for reproducible draws (`None`: the sampler's
                running seed).
            labels: integer `(batch,)` classes, for class-conditional models.

        Returns:
            int32 `(batch, height, width, channels)`: the given rows of
            `images` unchanged, the rest drawn.
        """
        height, width, channels = self.image_shape
        images = check_image_batch("images", images, self.image_shape)
        if (
            isinstance(given_rows, bool)
            or not isinstance(given_rows, (int, np.integer))
            or not 0 <= given_rows <= height
        ):
            raise ValueError(
                f"`given_rows` must be an integer from 0 to the image height "
                f"{height}. Received: given_rows={given_rows!r}. Pass e.g. "
                f"given_rows={height // 2} to complete the lower half."
            )
        self._check_whole_block_rows(int(given_rows))
        temperature = check_temperature(temperature)
        conditional = self.stack.embedding.num_classes is not None
        if conditional and labels is None:
            raise ValueError(
                "This model is class-conditional: pass `labels`, integer "
                "(batch,) classes."
            )
        if not conditional and labels is not None:
            raise ValueError(
                "`labels` were given to a model without classes; leave them out."
            )
        if seed is not None:
            seed = int(seed)
            check_int("seed", seed, minimum=0)
            self._seeds = np.random.default_rng(seed)
        if labels is not None:
            labels = np.asarray(labels)
        completed = self.complete_tensor(
            tf.constant(images.astype(np.int32)),
            int(given_rows),
            temperature,
            seed,
            labels,
        )
        return np.asarray(completed)

    def complete_tensor(
        self,
        images: tf.Tensor,
        given_rows: int,
        temperature: float = 1.0,
        seed: Any = None,
        labels: Any = None,
    ) -> tf.Tensor:
        """`complete` on tensors, without its checks: a step of a graph.

        What `complete` runs once it has checked its arguments, and what a
        `tf.function` (the image SavedModel of `keras_transformer.export`)
        calls with symbolic tensors: the same draws for the same seed (the
        search's step `i` draws with the seed `(seed mod 2^31, i)`).

        Args:
            images: int32 `(batch, height, width, channels)`; only the top
                `given_rows` rows are read.
            given_rows: a Python integer, checked by the caller.
            temperature: a Python float, checked by the caller.
            seed: None (the sampler's running seed) or an integer scalar (a
                tensor in a graph).
            labels: int32 `(batch,)` classes of a class-conditional model.

        Returns:
            int32 `(batch, height, width, channels)`.
        """
        if seed is None:
            seed = int(self._seeds.integers(2**31 - 1))
        seed = tf.cast(tf.math.floormod(tf.cast(seed, tf.int64), 2**31), tf.int32)
        order = self.generation_positions.astype(np.int32)
        batch = tf.shape(images)[0]
        # 1 (categorical: one channel per position) or the channels (DMOL).
        per_position = int(np.prod(self.image_shape)) // len(order)
        # (batch, positions, intensities per position), in generation order.
        values = tf.gather(
            tf.reshape(tf.cast(images, tf.int32), (batch, len(order), per_position)),
            order,
            axis=1,
        )
        conditional = labels is not None
        search = self._search(temperature == 0.0, conditional)
        drawn = search(
            tf.reshape(values, (batch, len(order) * per_position)),
            tf.constant(given_rows * len(order) * per_position // self.image_shape[0]),
            tf.constant(max(temperature, 1e-30), tf.float32),
            seed,
            tf.zeros((batch,), tf.int32)
            if labels is None
            else tf.reshape(tf.cast(labels, tf.int32), (batch,)),
        )
        # Back from the generation order to the raster order.
        drawn = tf.reshape(drawn, (batch, len(order), per_position))
        raster = tf.gather(drawn, np.argsort(order).astype(np.int32), axis=1)
        return tf.reshape(raster, (batch, *self.image_shape))


def complete_images(
    model: keras.Model,
    images: Any,
    given_rows: int,
    temperature: float = 1.0,
    seed: int | None = None,
    labels: Any | None = None,
) -> np.ndarray:
    """`ImageSampler(model).complete(...)`: see `ImageSampler.complete`."""
    return ImageSampler(model).complete(images, given_rows, temperature, seed, labels)


def sample_images(
    model: keras.Model,
    num_images: int,
    temperature: float = 1.0,
    seed: int | None = None,
    labels: Any | None = None,
) -> np.ndarray:
    """Draws `num_images` whole images (no given rows).

    Returns:
        int32 `(num_images, height, width, channels)`.
    """
    check_positive_int("num_images", num_images)
    sampler = ImageSampler(model)
    blank = np.zeros((num_images, *sampler.image_shape), np.int32)
    return sampler.complete(blank, 0, temperature, seed, labels)

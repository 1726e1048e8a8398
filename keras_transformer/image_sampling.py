"""Sampling and completing images with the Image Transformer (§5, Figure 1).

`complete_images(model, images, given_rows)` keeps the top `given_rows`
rows of each image and draws the rest, one intensity (categorical) or one
pixel (DMOL) at a time in the model's generation order (§3.2: query block
after query block in raster order, raster order inside each block; or one
raster order over the image for `generation_order="image"`), each from the
model's distribution given everything generated before it, at a
`temperature`. In the block order the given rows must be whole rows of
query blocks (a multiple of the query block's height), so that they are
exactly the first positions generated. The loop is one
`tf.while_loop` in a `tf.function` over the model's cached step
(`ImageTransformerStack.step`): every position costs one pass through the
blocks for that position alone, attending to the cached keys and values of
its memory block. The given rows go through the same loop, which fills the
caches, but their values are copied from the input, never drawn.

`temperature = 1` samples the model; smaller values sharpen every
distribution; `temperature = 0` takes the most likely value at each step
(greedy).
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
import tensorflow as tf
from keras import ops

from keras_transformer.data.images import check_image_batch
from keras_transformer.layers.pixel_outputs import check_temperature
from keras_transformer.models.image_transformer import ImageTransformerStack
from keras_transformer.validation import check_positive_int

__all__ = ["ImageSampler", "complete_images", "sample_images"]


class ImageSampler:
    """Completes images from their top rows with a model's cached step.

    One compiled loop is kept per `(given_rows, temperature)`, so repeated
    calls do not trace again.

    Args:
        model: a model from `build_image_transformer` (or loaded).
        jit_compile: compile the loop with XLA.

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
        self._loops: dict[tuple[int, float, bool], Any] = {}
        self._seed = keras.random.SeedGenerator(0)

    @property
    def image_shape(self) -> tuple[int, int, int]:
        return self.stack.image_shape

    @property
    def generation_positions(self) -> np.ndarray:
        """`(n,)`: the raster positions in the order the loop writes them."""
        return np.asarray(self.stack.generation_positions)

    def _loop(self, given_rows: int, temperature: float, conditional: bool) -> Any:
        key = (given_rows, temperature, conditional)
        if key in self._loops:
            return self._loops[key]
        stack, seed = self.stack, self._seed
        rows, cols = stack.grid_shape
        length, given = rows * cols, given_rows * cols
        # (n,): the raster position written at each step.
        order = self.generation_positions.astype("int32")

        def run(values: Any, labels: Any) -> Any:
            # values: int32 (batch, n) intensities or (batch, n, channels)
            # pixels in raster order.
            labels = labels if conditional else None
            caches = stack.init_cache(tf.shape(values)[0])
            positions = tf.constant(order)

            def body(step: Any, values: Any, caches: Any) -> Any:
                # The position of this step and of the one before it.
                index = tf.gather(positions, step)
                before = tf.gather(positions, tf.maximum(step - 1, 0))
                previous = tf.gather(values, before, axis=1)
                outputs, caches = stack.step(previous, caches, index, labels)
                drawn = stack.sample(outputs, temperature=temperature, seed=seed)
                kept = tf.gather(values, index, axis=1)
                # The given rows are the first `given` steps.
                value = tf.where(step < given, kept, ops.cast(drawn, "int32"))
                start = (0, index, 0) if values.shape.rank == 3 else (0, index)
                values = ops.slice_update(values, start, value[:, None])
                return step + 1, values, caches

            _, values, _ = tf.while_loop(
                lambda step, *_: step < length,
                body,
                (tf.constant(0, tf.int32), values, caches),
                maximum_iterations=length,
            )
            return values

        loop = tf.function(run, jit_compile=self.jit_compile, reduce_retracing=True)
        self._loops[key] = loop
        return loop

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
        calls with symbolic tensors: the same draws for the same seed.

        Args:
            images: int32 `(batch, height, width, channels)`; only the top
                `given_rows` rows are read.
            given_rows: a Python integer, checked by the caller.
            temperature: a Python float, checked by the caller.
            seed: None (the running seed) or an integer scalar (a tensor in
                a graph).
            labels: int32 `(batch,)` classes of a class-conditional model.

        Returns:
            int32 `(batch, height, width, channels)`.
        """
        height, width, channels = self.image_shape
        batch = tf.shape(images)[0]
        if seed is not None:
            state = tf.cast(seed, self._seed.state.dtype)
            self._seed.state.assign(tf.stack([state, tf.zeros_like(state)]))
        # The raster-order values: (batch, n) intensities or (batch, n, C).
        if self.stack.categorical:
            values = tf.reshape(images, (batch, height * width * channels))
        else:
            values = tf.reshape(images, (batch, height * width, channels))
        conditional = labels is not None
        label_tensor = (
            tf.zeros((batch,), tf.int32)
            if labels is None
            else tf.reshape(tf.cast(labels, tf.int32), (batch,))
        )
        loop = self._loop(given_rows, temperature, conditional)
        result = loop(tf.cast(values, tf.int32), label_tensor)
        return tf.reshape(result, (batch, height, width, channels))


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

"""Image sampling as a search: the Image Transformer's step for `run_search`.

Sampling an image is decoding with one hypothesis per image: one search
step per intensity, in the model's generation order (§3.2), each from the
model's distribution given everything generated before it. The step
function turns the model's output into log-probabilities over the 256
intensities, and the one search loop (`search.run_search`) with the
greedy or sampling strategy picks them; the given top rows are the
search's forced prefix.

- categorical output (one intensity per position): the step is
  `ImageTransformerStack.decode_beam_step` and the log-softmax of its 256
  logits;
- DMOL output (one pixel per position): `channels` search steps per pixel.
  The first runs the model step; each gives the exact distribution of its
  channel given the channels drawn before it, `log p(x_c = v | x_<c)`
  (`dmol_intensity_log_probs`), so the channels' log-probabilities sum to
  the mixture's `log p(pixel)`. Only the drawn channel is evaluated over
  the 256 values: its logistic means are linear in the earlier channels
  (PixelCNN++ §2.2), which are fixed.

Reference: Parmar et al. (2018), "Image Transformer", §3.2, §3.4 and §5;
Salimans et al. (2017), "PixelCNN++", §2.1-2.2.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf
from keras import ops

from keras_transformer.decoding.search import StepFunction, run_search
from keras_transformer.decoding.settings import DecodeSettings
from keras_transformer.decoding.strategies import SearchOptions, get_strategy
from keras_transformer.layers.pixel_outputs import (
    NUM_INTENSITIES,
    check_pixels,
    discretized_logistic_log_probs,
    dmol_components,
)
from keras_transformer.models.image_transformer import ImageTransformerStack

__all__ = [
    "dmol_intensity_log_probs",
    "image_search_step",
    "intensity_log_probs",
    "sample_intensities",
]


def dmol_intensity_log_probs(
    params: Any, pixels: Any, channel: Any, num_mixtures: int, channels: int
) -> Any:
    """`log p(x_channel = v | x_<channel)` for the 256 intensities `v`.

    Under the mixture `p(pixel) = sum_k pi_k prod_c p_k(x_c | x_<c)`, the
    distribution of a channel given the earlier ones weighs each component
    by its posterior given them: `log sum_k pi_k prod_{c <= channel} p_k(.)`
    over `v`, normalized over `v` (each component's bins sum to 1).

    Args:
        params: `(batch, K (1 + 2C + C(C-1)/2))` DMOL parameters.
        pixels: integer `(batch, C)`: the channels before `channel` are
            read, the others ignored.
        channel: the channel, an int or a scalar int32 tensor.
        num_mixtures: `K`.
        channels: `C`.

    Returns:
        float32 `(batch, 256)` log-probabilities.
    """
    channel = ops.cast(channel, "int32")
    channel_ids = ops.arange(channels, dtype="int32")
    earlier = ops.where(channel_ids < channel, ops.cast(pixels, "int32"), 0)
    earlier = check_pixels("pixels", earlier)
    # (batch, C, K) each; the means are given the earlier channels, fixed.
    logits, means, log_scales = dmol_components(params, earlier, num_mixtures, channels)
    # (batch, K): sum_{c < channel} log p_k(x_c | x_<c), once per step.
    per_channel = discretized_logistic_log_probs(earlier[..., None], means, log_scales)
    before = ops.sum(
        ops.where((channel_ids < channel)[:, None], per_channel, 0.0), axis=-2
    )
    # (batch, 256, K): log p_k(x_channel = v | x_<channel), the 256 values
    # against the channel's one logistic per component.
    values = ops.arange(NUM_INTENSITIES, dtype="int32")[:, None]
    current = discretized_logistic_log_probs(
        values,
        ops.take(means, channel, axis=-2)[:, None, :],
        ops.take(log_scales, channel, axis=-2)[:, None, :],
    )
    # (batch, 256, K): log pi_k + sum_{c <= channel} log p_k.
    mixture = ops.log_softmax(logits, axis=-1)[:, None, :]
    joint = mixture + (before[:, None, :] + current)
    return ops.log_softmax(ops.logsumexp(joint, axis=-1), axis=-1)


def intensity_log_probs(
    stack: ImageTransformerStack, outputs: Any, pixels: Any, channel: Any
) -> Any:
    """The log-probabilities of the 256 values of the next intensity.

    Args:
        stack: the model's layers.
        outputs: one position's output of `decode_beam_step` without its
            beam axis: `(batch, 256)` logits or `(batch, P)` DMOL parameters.
        pixels: DMOL only: integer `(batch, C)` with the pixel's channels
            drawn so far.
        channel: DMOL only: the channel to draw.

    Returns:
        float32 `(batch, 256)`.
    """
    if stack.categorical:
        return ops.log_softmax(ops.cast(outputs, "float32"), axis=-1)
    head = stack.head
    return dmol_intensity_log_probs(
        outputs, pixels, channel, head.num_mixtures, head.channels
    )


def image_search_step(
    stack: ImageTransformerStack,
    batch_size: Any,
    labels: Any | None = None,
    jit_compile: bool = False,
) -> tuple[StepFunction, Any]:
    """The step function of image sampling and its initial state.

    Search step `i` draws intensity `i` of the generation order (position
    `i // C`, channel `i % C` for DMOL); its input token is the intensity
    drawn at step `i - 1`.

    Args:
        stack: the model's layers.
        batch_size: images per search.
        labels: integer `(batch,)` classes (class-conditional models); they
            stay in the step's closure (the search keeps every image in the
            batch: one hypothesis, no dropping).
        jit_compile: the search is compiled with XLA. The DMOL step runs the
            model at a pixel's first channel only (`tf.cond`); the other
            branch keeps the caches, which an XLA conditional copies whole
            at every step unless they are rewritten in place
            (`_rewritten_in_place`; the same values). A TensorFlow graph
            passes them through free and would copy the rewrite.

    Returns:
        `(step_fn, state)` for `run_search`.
    """
    order = tf.constant(np.asarray(stack.generation_positions).astype("int32"))
    caches = stack.init_cache(batch_size)
    if stack.categorical:

        def categorical_step(token_ids: Any, caches: Any, index: Any) -> Any:
            position = tf.gather(order, index)
            outputs, caches = stack.decode_beam_step(
                token_ids[:, None], caches, position, labels
            )
            return intensity_log_probs(stack, outputs[:, 0], None, None), caches

        return categorical_step, caches

    channels = stack.image_shape[2]
    state = {
        "caches": caches,
        # The pixel being drawn (the previous one until its first channel).
        "pixel": tf.zeros((batch_size, channels), tf.int32),
        "params": tf.zeros((batch_size, stack.head.num_parameters), tf.float32),
    }

    def dmol_step(token_ids: Any, state: Any, index: Any) -> Any:
        channel = index % channels
        # The token is the channel drawn at the step before (none at 0).
        written = tf.equal(tf.range(channels), (index - 1) % channels)[None]
        pixel = tf.where(written & (index > 0), token_ids[:, None], state["pixel"])

        def model_step() -> tuple[Any, Any]:
            position = tf.gather(order, index // channels)
            outputs, caches = stack.decode_beam_step(
                pixel[:, None], state["caches"], position, labels
            )
            return outputs[:, 0], caches

        def keep() -> tuple[Any, Any]:
            caches = state["caches"]
            if jit_compile:
                caches = tf.nest.map_structure(_rewritten_in_place, caches)
            return state["params"], caches

        params, caches = tf.cond(tf.equal(channel, 0), model_step, keep)
        log_probs = intensity_log_probs(stack, params, pixel, channel)
        return log_probs, {"caches": caches, "pixel": pixel, "params": params}

    return dmol_step, state


def _rewritten_in_place(tensor: Any) -> Any:
    """`tensor` with its first element written back over itself: the same
    values, an update XLA does in place (where a conditional's branch that
    returns its input unchanged makes XLA copy it)."""
    if not tensor.shape.rank:
        return tensor
    start = [0] * tensor.shape.rank
    return ops.slice_update(
        tensor, start, ops.slice(tensor, start, [1] * tensor.shape.rank)
    )


def sample_intensities(
    stack: ImageTransformerStack,
    given: Any,
    given_length: Any,
    temperature: Any,
    seed: Any,
    labels: Any | None = None,
    greedy: bool = False,
    jit_compile: bool = False,
) -> tf.Tensor:
    """Every intensity of a batch of images, drawn in the generation order.

    One `run_search` with one hypothesis per image: greedy (the most likely
    value at each step) or sampling from `softmax(log p / temperature)`; the
    first `given_length` intensities are forced to `given`'s.

    Args:
        stack: the model's layers.
        given: int32 `(batch, n)`: the intensities in generation order;
            the first `given_length` are kept.
        given_length: int32 scalar or `(batch,)`: how many are given.
        temperature: float32 scalar `> 0` (sampling).
        seed: int32 scalar; step `i` draws with the seed `(seed, i)`.
        labels: integer `(batch,)` classes (class-conditional models).
        greedy: take the most likely value (temperature 0).
        jit_compile: the caller compiles the search with XLA (see
            `image_search_step`).

    Returns:
        int32 `(batch, n)`: the intensities in generation order.
    """
    batch = tf.shape(given)[0]
    length = given.shape[1]
    method = "greedy" if greedy else "sample"
    options = SearchOptions(
        DecodeSettings(method=method), alpha=0.0, temperature=temperature, seed=seed
    )
    strategy = get_strategy(method, options)
    step_fn, state = image_search_step(stack, batch, labels, jit_compile)
    given_lengths = tf.broadcast_to(tf.cast(given_length, tf.int32), [batch])
    token_ids, _, _ = run_search(
        strategy,
        step_fn,
        state,
        tf.fill([batch], length),
        max_length=length,
        end_id=None,
        pad_id=None,
        prefix=(given, given_lengths),
    )
    return token_ids

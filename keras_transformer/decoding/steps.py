"""Step functions of a model: the cached one the searches run, and the
uncached reference the tests compare it with.

The cached step runs the encoder once (`TransformerStack.encode`) and feeds
one token per hypothesis and step through `TransformerStack.decode_beam_step`
(greedy decoding and sampling are its one-hypothesis case). The hypotheses of
an example share its encoder-decoder keys and values, and self-attention
caches with one slot per hypothesis and position that are never reordered:
after a step beam search reorders a small table (`history`) of which slot
holds each hypothesis' past, not the caches.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import tensorflow as tf

from keras_transformer.conventions import PAD_ID, START_ID
from keras_transformer.decoding.search import GatherFunction, StepFunction, write_at
from keras_transformer.models.transformer import TransformerStack

#: The entries of a decoder block's cache that stay fixed while decoding.
_STATIC_CACHE_KEYS = ("cross_keys", "cross_values")


class ModelStep(NamedTuple):
    """A step function with its initial state and how the loop moves it."""

    step: StepFunction
    state: Any
    gather: GatherFunction | None
    invariants: Any


def _split_caches(caches: list[dict[str, Any]]) -> tuple[list[dict], list[dict]]:
    """`(fixed, changing)` entries of each block's cache."""
    fixed = [{k: v for k, v in c.items() if k in _STATIC_CACHE_KEYS} for c in caches]
    changing = [
        {k: v for k, v in c.items() if k not in _STATIC_CACHE_KEYS} for c in caches
    ]
    return fixed, changing


def _history_mask(
    history: tf.Tensor | None, index: tf.Tensor, size: Any, beam: int, length: Any
) -> tf.Tensor:
    """`beam_mask` of `decode_beam_step`: `(size, beam, length * beam)`, true
    where hypothesis `k` may attend to slot `j` of position `t` (`(1, 1,
    length)` for one hypothesis: it broadcasts over the rows)."""
    decoded = tf.range(length) <= index  # positions not decoded yet: False
    if history is None:  # one hypothesis: every decoded position is its own
        return decoded[None, None]  # (1, 1, length), the same for every row
    # (size, beam, length, beam) -> (size, beam, length * beam): which slot
    # of each position belongs to each hypothesis' history.
    mask = tf.equal(history[:, :, :length, None], tf.range(beam))
    mask &= decoded[:, None]
    return tf.reshape(mask, [size, beam, length * beam])


def _gather(state: Any, examples: tf.Tensor | None, parents: tf.Tensor | None) -> Any:
    """Keeps the examples `examples`; reorders only the history table."""
    if examples is not None:
        state = tf.nest.map_structure(lambda x: tf.gather(x, examples), state)
    if parents is None or "history" not in state:  # one hypothesis: no table
        return state
    return {**state, "history": tf.gather(state["history"], parents, batch_dims=1)}


def _growing_invariants(state: Any) -> Any:
    """Examples leave (first dimension) and the self-attention caches grow
    (their third)."""
    invariants = tf.nest.map_structure(
        lambda x: tf.TensorShape([None, *x.shape[1:]]), state
    )
    for cache in invariants["caches"]:
        for key in ("self_keys", "self_values"):
            shape = cache[key].as_list()
            cache[key] = tf.TensorShape([None, shape[1], None, *shape[3:]])
    return invariants


def cached_step(
    stack: TransformerStack,
    source_ids: tf.Tensor,
    max_length: int | tf.Tensor,
    beam_size: int,
    static_shapes: bool,
) -> ModelStep:
    """Encodes once; returns the cached step of `beam_size` rows per example.

    With `static_shapes` (XLA) the caches hold `max_length` positions written
    by index, and what stays fixed (the encoder-decoder keys and values, the
    source padding mask) are constants of the loop, not part of its state.
    Otherwise (a TensorFlow graph) the caches grow by one position per step
    and every tensor of the state has one row per example, so that finished
    examples can leave. The state's `history` `(batch, beam, max_length)`
    (beam search only) names the slot that holds hypothesis `k`'s keys and
    values at position `t`.
    """
    beam, grow = beam_size, not static_shapes
    encoder_output = stack.encode(source_ids, training=False)
    caches = stack.init_cache(encoder_output, 0 if grow else max_length, beam)
    fixed, changing = _split_caches(caches)
    padding_mask = tf.not_equal(source_ids, PAD_ID)
    # E^T once per search, not in every step (`ScaledEmbedding.output_matrix`).
    output_matrix = stack.target_embedding.output_matrix()
    state: dict[str, Any] = {"caches": changing}
    if grow:
        state.update(fixed=fixed, padding_mask=padding_mask)
    if beam > 1:
        batch = tf.shape(source_ids)[0]
        state["history"] = tf.zeros((batch, beam, max_length), tf.int32)

    def step(token_ids: tf.Tensor, state: Any, index: tf.Tensor) -> Any:
        size = tf.shape(token_ids)[0] // beam
        history = state.get("history")
        if history is not None:  # hypothesis k writes slot k of `index`
            slots = tf.tile(tf.range(beam)[None], [size, 1])
            history = write_at(history, index, slots)
        length = index + 1 if grow else max_length
        blocks = [
            {**f, **c}
            for f, c in zip(state.get("fixed", fixed), state["caches"], strict=True)
        ]
        logits, blocks = stack.decode_beam_step(
            tf.reshape(token_ids, [size, beam]),
            blocks,
            index,
            state.get("padding_mask", padding_mask),
            _history_mask(history, index, size, beam, length),
            append=grow,
            output_matrix=output_matrix,
        )
        # (size * beam, vocabulary), the vocabulary static where it is known.
        vocabulary = logits.shape[-1] or -1
        log_probs = tf.nn.log_softmax(
            tf.reshape(tf.cast(logits, tf.float32), [size * beam, vocabulary])
        )
        new_state = {**state, "caches": _split_caches(blocks)[1]}
        if history is not None:
            new_state["history"] = history
        return log_probs, new_state

    invariants = _growing_invariants(state) if grow else None
    return ModelStep(step, state, _gather, invariants)


def uncached_step(
    stack: TransformerStack,
    source_ids: tf.Tensor,
    max_length: int | tf.Tensor,
    beam_size: int,
    start_id: int = START_ID,
) -> ModelStep:
    """The reference step: `TransformerStack.decode` on the whole prefix.

    The encoder runs once, but step `i` re-runs the decoder stack on all
    `i + 1` positions (O(length^2) work per sequence instead of O(length));
    only the last position is projected onto the vocabulary. The state is
    the decoder input so far, one row per hypothesis (reordered by the
    search). Shapes grow: a TensorFlow graph, not XLA.
    """
    encoder_output = tf.repeat(stack.encode(source_ids, training=False), beam_size, 0)
    padding_mask = tf.repeat(tf.not_equal(source_ids, PAD_ID), beam_size, 0)
    rows = tf.shape(encoder_output)[0]
    # The decoder inputs so far: START then the outputs.
    prefix = tf.concat(
        [
            tf.fill([rows, 1], tf.constant(start_id, tf.int32)),
            tf.zeros([rows, max_length], tf.int32),
        ],
        axis=1,
    )

    def step(token_ids: tf.Tensor, prefix: tf.Tensor, index: tf.Tensor) -> Any:
        prefix = write_at(prefix, index, token_ids)
        # (rows, 1, vocabulary): only the last position is projected.
        logits = stack.decode(
            prefix[:, : index + 1],
            encoder_output,
            padding_mask,
            training=False,
            last_position_only=True,
        )
        return tf.nn.log_softmax(tf.cast(logits[:, 0], tf.float32)), prefix

    return ModelStep(step, prefix, None, None)


__all__ = ["ModelStep", "cached_step", "uncached_step"]

"""The beam search of an earlier version, the reference of the tests.

Every hypothesis had its own key/value caches (its example's, repeated
`beam_size` times, encoder-decoder keys and values included), the driver
gathered all of them by parent after every step, kept every example in the
batch until all had finished, and stopped an example only once its *worst*
kept finished hypothesis could no longer be beaten. `former_run_beam_search`
is that driver as it was. Today's search
(`keras_transformer.decoding`) must give the same outputs.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from keras_transformer.conventions import END_ID, PAD_ID, START_ID
from keras_transformer.decoding import StepFunction, length_penalty
from keras_transformer.models import TransformerStack


def former_beam_search_graph(
    model: Any,
    source_ids: tf.Tensor,
    limits: tf.Tensor,
    *,
    max_length: int,
    beam_size: int = 4,
    length_penalty: float | tf.Tensor = 0.6,
    start_id: int = START_ID,
    end_id: int | None = END_ID,
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """`Decoder.beam_search_graph` as it was: per-hypothesis caches, reordered."""
    stack = TransformerStack.of(model)
    encoded = stack.encode(source_ids, training=False)
    caches = [
        {key: tf.repeat(value, beam_size, axis=0) for key, value in cache.items()}
        for cache in stack.init_cache(encoded, max_length)
    ]
    mask = tf.repeat(tf.not_equal(source_ids, PAD_ID), beam_size, axis=0)

    def step(token_ids: tf.Tensor, caches: Any, index: tf.Tensor) -> Any:
        # One hypothesis per row, attending to the positions up to `index`.
        history = tf.range(max_length) <= index
        history = tf.broadcast_to(history, [tf.shape(token_ids)[0], 1, max_length])
        logits, caches = stack.decode_beam_step(
            token_ids[:, None], caches, index, mask, history
        )
        return tf.nn.log_softmax(tf.cast(logits[:, 0], tf.float32)), caches

    return former_run_beam_search(
        step,
        caches,
        limits,
        max_length=max_length,
        beam_size=beam_size,
        length_penalty_alpha=length_penalty,
        start_id=start_id,
        end_id=end_id,
    )


# The previous release's driver, unchanged.
def former_run_beam_search(
    step_fn: StepFunction,
    state: Any,
    limits: Any,
    *,
    max_length: int,
    beam_size: int = 4,
    length_penalty_alpha: float | tf.Tensor = 0.6,
    start_id: int = START_ID,
    end_id: int | None = END_ID,
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """Beam search with the GNMT length penalty (§6.1; Wu et al. 2016).

    Each step extends the `beam_size` live hypotheses of every example by every
    token and keeps the `2 * beam_size` best candidates (by log-probability).
    Those ending in END and ranked within the first `beam_size` become finished
    hypotheses, scored `log P / lp(length)`; the `beam_size` best finished ones
    are kept. The `beam_size` best candidates not ending in END are the new
    live hypotheses (there are always enough: at most `beam_size` candidates
    end in END). An example stops early when its worst kept finished score
    beats the best live log-probability divided by the largest penalty it may
    still get, `lp(limit)`, because log-probabilities only decrease. An
    example without any finished hypothesis returns its best live one, scored
    with `lp(limit)`.

    Args:
        step_fn: `(token_ids (batch * beam,), state, index) -> (log_probs
            (batch * beam, vocabulary), state)`. Row `b * beam_size + k` is
            hypothesis `k` of example `b`; every tensor of `state` (leading
            dimension `batch * beam_size`) is gathered by the parent hypothesis
            after each step.
        state: the initial state, already repeated `beam_size` times per
            example (`tf.repeat(x, beam_size, axis=0)`).
        limits: int `(batch,)`: the maximum output length of each example.
        max_length: static bound on `limits`, the size of the outputs.
        beam_size: number of hypotheses kept per example.
        length_penalty_alpha: `alpha`; 0 ranks by raw log-probability.
        start_id: the first decoder input.
        end_id: the token that finishes a hypothesis; `None` for none.

    Returns:
        `(token_ids (batch, max_length), scores (batch,), lengths (batch,))`
        of the best hypothesis of each example.
    """
    limits = tf.cast(tf.convert_to_tensor(limits), tf.int32)
    batch = tf.shape(limits)[0]
    beam = beam_size
    end = -1 if end_id is None else end_id
    neg_inf = tf.constant(-np.inf, tf.float32)
    # The largest penalty a hypothesis of each example can still receive.
    max_penalty = length_penalty(limits, length_penalty_alpha)
    # (batch, beam): only the first live hypothesis exists at the start.
    initial_log_probs = tf.tile(
        tf.constant([[0.0] + [-np.inf] * (beam - 1)], tf.float32), [batch, 1]
    )
    candidate_in_beam = tf.range(2 * beam) < beam
    example_offsets = (tf.range(batch) * beam)[:, None]

    def cond(index, *loop_vars: Any) -> tf.Tensor:
        done = loop_vars[-2]
        return tf.logical_not(tf.reduce_all(done))

    def body(
        index,
        alive_ids,
        alive_log_probs,
        alive_last,
        finished_ids,
        finished_scores,
        finished_lengths,
        done,
        state,
    ):
        log_probs, state = step_fn(tf.reshape(alive_last, [-1]), state, index)
        log_probs = _mask_padding(tf.cast(log_probs, tf.float32))
        vocabulary = tf.shape(log_probs)[-1]
        # (batch, beam * vocabulary): log P of every one-token extension.
        candidates = tf.reshape(
            alive_log_probs[:, :, None]
            + tf.reshape(log_probs, [batch, beam, vocabulary]),
            [batch, beam * vocabulary],
        )
        top_log_probs, top_indices = tf.math.top_k(candidates, k=2 * beam)
        parents = top_indices // vocabulary
        tokens = top_indices % vocabulary
        # (batch, 2 * beam, max_length)
        candidate_ids = _write(
            tf.gather(alive_ids, parents, batch_dims=1), index, tokens
        )
        is_end = tf.equal(tokens, end)

        # Live hypotheses: the best `beam` candidates not ending in END.
        new_alive_log_probs, picked = tf.math.top_k(
            tf.where(is_end, neg_inf, top_log_probs), k=beam
        )
        new_alive_ids = tf.gather(candidate_ids, picked, batch_dims=1)
        new_alive_last = tf.gather(tokens, picked, batch_dims=1)
        new_parents = tf.gather(parents, picked, batch_dims=1)

        # Finished hypotheses: merge the new ones with those kept so far.
        new_scores = tf.where(
            is_end & candidate_in_beam,
            top_log_probs / length_penalty(index + 1, length_penalty_alpha),
            neg_inf,
        )
        merged_scores = tf.concat([finished_scores, new_scores], axis=1)
        new_finished_scores, picked = tf.math.top_k(merged_scores, k=beam)
        merged_ids = tf.concat([finished_ids, candidate_ids], axis=1)
        new_finished_ids = tf.gather(merged_ids, picked, batch_dims=1)
        merged_lengths = tf.concat(
            [finished_lengths, tf.fill([batch, 2 * beam], index + 1)], axis=1
        )
        new_finished_lengths = tf.gather(merged_lengths, picked, batch_dims=1)

        # Examples already done keep their hypotheses.
        def keep(old: tf.Tensor, new: tf.Tensor) -> tf.Tensor:
            frozen = tf.reshape(done, [-1] + [1] * (len(new.shape) - 1))
            return tf.where(frozen, old, new)

        alive_ids = keep(alive_ids, new_alive_ids)
        alive_log_probs = keep(alive_log_probs, new_alive_log_probs)
        alive_last = keep(alive_last, new_alive_last)
        finished_ids = keep(finished_ids, new_finished_ids)
        finished_scores = keep(finished_scores, new_finished_scores)
        finished_lengths = keep(finished_lengths, new_finished_lengths)

        # Reorder the state (e.g. the self-attention caches) by parent.
        rows = tf.reshape(example_offsets + new_parents, [-1])
        state = tf.nest.map_structure(lambda x: tf.gather(x, rows), state)

        # GNMT early stopping: no live hypothesis can beat the worst finished.
        best_possible = alive_log_probs[:, 0] / max_penalty
        cannot_improve = finished_scores[:, -1] > best_possible
        done = done | cannot_improve | (index + 1 >= limits)
        return (
            index + 1,
            alive_ids,
            alive_log_probs,
            alive_last,
            finished_ids,
            finished_scores,
            finished_lengths,
            done,
            state,
        )

    loop_vars = (
        tf.constant(0, tf.int32),
        tf.zeros((batch, beam, max_length), tf.int32),
        initial_log_probs,
        tf.fill((batch, beam), tf.constant(start_id, tf.int32)),
        tf.zeros((batch, beam, max_length), tf.int32),
        tf.fill((batch, beam), neg_inf),
        tf.zeros((batch, beam), tf.int32),
        limits <= 0,
        state,
    )
    (
        _,
        alive_ids,
        alive_log_probs,
        _,
        finished_ids,
        finished_scores,
        finished_lengths,
        _,
        _,
    ) = tf.while_loop(cond, body, loop_vars, maximum_iterations=max_length)
    has_finished = finished_scores[:, 0] > neg_inf
    token_ids = tf.where(has_finished[:, None], finished_ids[:, 0], alive_ids[:, 0])
    scores = tf.where(
        has_finished, finished_scores[:, 0], alive_log_probs[:, 0] / max_penalty
    )
    lengths = tf.where(has_finished, finished_lengths[:, 0], tf.maximum(limits, 0))
    return token_ids, scores, lengths


def _mask_padding(log_probs: tf.Tensor) -> tf.Tensor:
    """Makes the padding id impossible: it marks the end of an output."""
    vocabulary = tf.shape(log_probs)[-1]
    is_padding = tf.equal(tf.range(vocabulary), PAD_ID)
    return tf.where(is_padding, tf.constant(-np.inf, log_probs.dtype), log_probs)


def _write(buffer: tf.Tensor, index: tf.Tensor, values: tf.Tensor) -> tf.Tensor:
    """`buffer[..., index] = values` for a `(..., length)` buffer (XLA-friendly)."""
    at_index = tf.equal(tf.range(tf.shape(buffer)[-1]), index)
    return tf.where(at_index, values[..., None], buffer)

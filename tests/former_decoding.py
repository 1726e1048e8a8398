"""The beam search of the previous release, the reference of the tests.

Every hypothesis had its own key/value caches (its example's, repeated
`beam_size` times, encoder-decoder keys and values included), and
`run_beam_search` gathered all of them by parent after every step. Today's
search (`keras_transformer.decoding`) must give the same outputs.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from keras_transformer.conventions import END_ID, PAD_ID, START_ID
from keras_transformer.decoding import run_beam_search
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
        logits, caches = stack.decode_step(token_ids[:, None], caches, index, mask)
        return tf.nn.log_softmax(tf.cast(logits[:, 0], tf.float32)), caches

    return run_beam_search(
        step,
        caches,
        limits,
        max_length=max_length,
        beam_size=beam_size,
        length_penalty_alpha=length_penalty,
        start_id=start_id,
        end_id=end_id,
    )

"""Tests of the search loop's forced prefix and `pad_id=None` (what image
sampling runs: the given rows are a forced prefix, intensity 0 a value)."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.decoding.search import force_prefix, run_search
from keras_transformer.decoding.strategies import BeamSearch, GreedySearch, Sampling


def _table_step(table):
    """Log-probs that depend on the whole prefix through a hash in the state."""

    def step(token_ids, codes, index):
        codes = (codes * 1000003 + tf.cast(token_ids, tf.int64) + 1) % 2147483647
        return tf.gather(table, codes % len(table)), codes

    return step


def _table(seed: int = 0) -> tf.Tensor:
    logits = np.random.default_rng(seed).normal(size=(97, 7)) * 2.0
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    return tf.constant(log_probs, tf.float32)


PREFIX_IDS = np.array([[4, 5, 6], [6, 0, 0], [5, 4, 0]], np.int32)
PREFIX_LENGTHS = np.array([3, 1, 0], np.int32)


@pytest.mark.parametrize("drop", [False, True])
@pytest.mark.parametrize(
    "strategy",
    [GreedySearch(), BeamSearch(3, 0.6), Sampling(tf.constant(1), 1.0)],
    ids=["greedy", "beam", "sample"],
)
def test_outputs_start_with_the_forced_prefix(strategy, drop: bool) -> None:
    """Every strategy keeps the forced tokens, the examples keep their own
    prefix when finished ones leave the batch, and the forced tokens add
    nothing to the score."""
    codes = tf.repeat(tf.constant([11, 12, 13], tf.int64), strategy.beam_size)
    table = _table()

    @tf.function(autograph=False)
    def search(prefix_ids, prefix_lengths):
        return run_search(
            strategy,
            _table_step(table),
            codes,
            tf.constant([5, 2, 6]),
            max_length=6,
            drop_finished=drop,
            prefix=(prefix_ids, prefix_lengths),
        )

    token_ids, scores, lengths = (x.numpy() for x in search(PREFIX_IDS, PREFIX_LENGTHS))
    for row, length in enumerate(PREFIX_LENGTHS):
        np.testing.assert_array_equal(token_ids[row, :length], PREFIX_IDS[row, :length])
        assert lengths[row] >= length
    assert np.all(np.isfinite(scores))


def test_forced_tokens_score_zero_and_the_rest_as_the_model() -> None:
    """With the whole output forced, the score is 0; one token fewer, the
    score is the model's log-probability of the last token."""
    table = _table(1)
    codes = tf.constant([21], tf.int64)
    forced = np.array([[4, 5, 6]], np.int32)

    def run(length: int) -> tuple[np.ndarray, float]:
        token_ids, scores, _ = run_search(
            GreedySearch(),
            _table_step(table),
            codes,
            [3],
            max_length=3,
            end_id=None,
            prefix=(forced, np.array([length], np.int32)),
        )
        return token_ids.numpy()[0], float(scores[0])

    tokens, score = run(3)
    np.testing.assert_array_equal(tokens, forced[0])
    assert score == 0.0
    tokens, score = run(2)
    np.testing.assert_array_equal(tokens[:2], forced[0, :2])
    state = 21
    for token in (2, 4, 5):  # START, then the two forced tokens
        state = (state * 1000003 + token + 1) % 2147483647
    expected = table.numpy()[state % 97]
    expected[0] = -np.inf  # the padding id is never generated
    assert tokens[2] == np.argmax(expected)
    np.testing.assert_allclose(score, expected.max(), rtol=1e-6)


def test_pad_id_none_lets_the_search_emit_id_zero() -> None:
    """Where every id is a value (image intensities), id 0 may be drawn."""
    log_probs = np.log(np.array([[0.9, 0.05, 0.05]], np.float32))

    def step(token_ids, state, index):
        return tf.constant(log_probs), state

    masked = run_search(GreedySearch(), step, (), [2], max_length=2, end_id=None)
    free = run_search(
        GreedySearch(), step, (), [2], max_length=2, end_id=None, pad_id=None
    )
    np.testing.assert_array_equal(masked[0].numpy(), [[1, 1]])
    np.testing.assert_array_equal(free[0].numpy(), [[0, 0]])


def test_force_prefix_only_touches_rows_inside_their_prefix() -> None:
    log_probs = tf.math.log(tf.fill((2, 4), 0.25))
    prefix = (tf.constant([[3, 1], [2, 2]]), tf.constant([2, 1]))
    out = force_prefix(log_probs, prefix, tf.constant(1)).numpy()
    np.testing.assert_array_equal(out[0], [-np.inf, 0.0, -np.inf, -np.inf])
    np.testing.assert_allclose(out[1], np.log(0.25))

"""Lexically constrained beam search (Post and Vilar 2018) against brute force."""

import itertools

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.conventions import END_ID, PAD_ID, START_ID
from keras_transformer.decoding.search import run_search
from keras_transformer.decoding.strategies.constrained import (
    ConstrainedBeamSearch,
    check_phrase_ids,
    pad_phrases,
    phrase_overlaps,
    unmet_phrases,
)

VOCABULARY = 6  # pad, unk, start, END, and the tokens 4, 5


def _hash_step(table):
    """Log-probs that depend on the whole prefix through a hash in the state."""

    def step(token_ids, codes, index):
        codes = (codes * 1000003 + tf.cast(token_ids, tf.int64) + 1) % 2147483647
        return tf.gather(table, codes % len(table)), codes

    return step


def _contains(output, phrase):
    return any(
        list(output[i : i + len(phrase)]) == list(phrase)
        for i in range(len(output) - len(phrase) + 1)
    )


def _exhaustive_best(table, code, limit, alpha, phrases):
    """The best END-terminated output of at most `limit` tokens that holds
    every phrase, by enumerating all of them."""
    best = (-np.inf, None)
    tokens = [t for t in range(VOCABULARY) if t not in (PAD_ID, END_ID)]
    for length in range(1, limit + 1):
        for body in itertools.product(tokens, repeat=length - 1):
            if not all(_contains(body, phrase) for phrase in phrases):
                continue
            output, state, log_prob = (*body, END_ID), code, 0.0
            for previous, token in zip((START_ID, *output), output, strict=False):
                state = (state * 1000003 + previous + 1) % 2147483647
                log_prob += float(table[state % len(table), token])
            score = log_prob / ((5 + length) / 6) ** alpha
            best = max(best, (score, list(output)))
    return best


def _search(table, codes, limits, phrases, beam, alpha):
    strategy = ConstrainedBeamSearch(beam, alpha, pad_phrases(phrases))
    return run_search(
        strategy,
        _hash_step(tf.constant(table)),
        tf.constant(np.repeat(codes, beam), tf.int64),
        limits,
        max_length=max(limits),
        drop_finished=True,
    )


# Phrases over the tokens 1, 4, 5 (1 is UNK, an ordinary token here); the
# overlapping ones ([4, 4, 5] after 4, 4, 4; [5, 4] sharing a 4 with
# [4, 5]) test the KMP fallback.
PHRASES = [
    [[4, 4, 5]],
    [[5, 4], [4, 5]],
    [[1], [5, 5]],
    [],
]


@pytest.mark.parametrize("alpha", [0.0, 0.6])
@pytest.mark.parametrize("phrases", PHRASES)
def test_wide_constrained_beam_finds_the_exhaustive_constrained_optimum(alpha, phrases):
    rng = np.random.default_rng(0)
    table = tf.nn.log_softmax(rng.normal(size=(101, VOCABULARY)) * 2.0).numpy()
    table = table.astype("float32")
    limits, codes, beam = [5, 6], [11, 12], 400  # 3 ** 5 live prefixes at most
    tokens, scores, lengths = _search(
        table, codes, limits, [phrases, phrases], beam, alpha
    )
    for row, (code, limit) in enumerate(zip(codes, limits, strict=True)):
        best_score, best_output = _exhaustive_best(table, code, limit, alpha, phrases)
        length = int(lengths.numpy()[row])
        assert list(tokens.numpy()[row, :length]) == best_output
        assert scores.numpy()[row] == pytest.approx(best_score, abs=1e-4)


def test_a_narrow_beam_still_meets_every_phrase():
    rng = np.random.default_rng(1)
    table = tf.nn.log_softmax(rng.normal(size=(101, VOCABULARY)) * 3.0).numpy()
    phrases = [[[5, 5, 4], [1, 4]], [[4, 1, 5]], [[5]]]
    tokens, _, lengths = _search(
        table.astype("float32"), [3, 4, 5], [12, 12, 12], phrases, 2, 0.6
    )
    assert unmet_phrases(tokens.numpy(), lengths.numpy(), phrases) == [[], [], []]
    assert all(tokens.numpy()[i, lengths.numpy()[i] - 1] == END_ID for i in range(3))


def test_a_phrase_longer_than_the_limit_is_reported_unmet():
    rng = np.random.default_rng(2)
    table = tf.nn.log_softmax(rng.normal(size=(101, VOCABULARY))).numpy()
    phrases = [[[4, 5, 4, 5]], [[5]]]
    tokens, _, lengths = _search(
        table.astype("float32"), [3, 4], [3, 3], phrases, 4, 0.6
    )
    assert unmet_phrases(tokens.numpy(), lengths.numpy(), phrases) == [[0], []]


def test_phrase_overlaps_is_the_kmp_table():
    # After [4, 4] of [4, 4, 5], a 4 leaves [4, 4] matched (k = 2 via p = 2).
    table = phrase_overlaps(tf.constant([[[4, 4, 5]]])).numpy()[0, 0]
    assert table[0].tolist() == [False, True, False, False]
    assert table[2].tolist() == [False, True, True, True]


def test_unmet_phrases_and_bad_phrases():
    assert unmet_phrases([[4, 5, 4, 3]], [4], [[[5, 4], [4, 4]]]) == [[1]]
    assert pad_phrases([[[4]], []]).shape == (2, 1, 1)
    with pytest.raises(ValueError, match="holds id 3"):
        check_phrase_ids([[[4, END_ID]]], VOCABULARY)
    with pytest.raises(ValueError, match="empty"):
        check_phrase_ids([[[]]], VOCABULARY)


# ------------------------------------------------------- through the Decoder
@pytest.fixture(scope="module")
def tiny_model():
    import keras

    from keras_transformer.models import build_transformer, presets

    keras.utils.set_random_seed(7)
    return build_transformer(presets["tiny"].replace(dropout=0.0))


@pytest.mark.parametrize("method", ["beam", "greedy"])
def test_decoder_meets_constraints_of_a_random_model(tiny_model, method):
    from keras_transformer.decoding import Decoder, DecodeSettings

    sources = np.array([[5, 6, 7, 3], [8, 9, 3, 0]])
    constraints = [[[10, 11], [12]], [[13, 14, 15]]]
    settings = DecodeSettings(method=method, extra_length=4)
    result = Decoder(tiny_model).decode(sources, settings, constraints=constraints)
    assert result.unmet_constraints == [[], []]
    outputs = result.to_list()
    assert _contains(outputs[0], [10, 11]) and _contains(outputs[0], [12])
    assert _contains(outputs[1], [13, 14, 15])


def test_decoder_reports_a_constraint_longer_than_the_output(tiny_model):
    from keras_transformer.decoding import Decoder, DecodeSettings

    result = Decoder(tiny_model).decode(
        np.array([[5, 3]]),
        DecodeSettings(extra_length=2),
        constraints=[[[10, 11, 12, 13, 14], [9]]],
    )
    # The first phrase cannot fit in 4 tokens: reported, not dropped.
    assert result.unmet_constraints[0][0] == 0
    output = result.to_list()[0]
    assert len(output) == 4 and 3 not in output  # no END before both are met
    assert result.unmet_constraints == [[0] + ([] if 9 in output else [1])]


def test_decoder_refuses_bad_constraints_in_one_line(tiny_model):
    from keras_transformer.decoding import Decoder, DecodeSettings

    decoder = Decoder(tiny_model)
    with pytest.raises(ValueError, match="one list of phrases per source"):
        decoder.decode(np.array([[5, 3]]), constraints=[[[9]], [[9]]])
    with pytest.raises(ValueError, match="not sampling"):
        decoder.decode(
            np.array([[5, 3]]), DecodeSettings(method="sample"), constraints=[[[9]]]
        )

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
    return build_transformer(
        presets["tiny"].replace(
            vocabulary_size=32, d_model=32, d_ff=64, num_heads=2, dropout=0.0
        )
    )


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


# ----------------------------------------------- a trained model, text, the CLI
def _years(count):
    """Sources of dates and, as each one's constraint, another one's year."""
    from keras_transformer.data import synthetic_dates

    test = synthetic_dates(count, seed=21)
    references = list(test.targets)
    years = [[references[(i + 1) % count][:4]] for i in range(count)]
    return list(test.sources), references, years


@pytest.mark.slow  # trains the tiny translator (~10 s quiet), decodes
def test_translator_meets_terminology_constraints_of_a_trained_model():
    from keras_transformer.translation import Translator
    from tests.export_helpers import tiny_translator

    model, tokenizer = tiny_translator()
    sources, references, years = _years(6)
    assert any(r[:4] != y[0] for r, (y) in zip(references, years, strict=True))
    translator = Translator(model, tokenizer, beam_size=4)
    outputs = translator.translate(sources, constraints=years)
    assert translator.unmet_constraints == [[]] * 6
    for output, (year,) in zip(outputs, years, strict=True):
        assert year in output
    with pytest.raises(ValueError, match="one list of phrases per line"):
        translator.translate(sources, constraints=years[:2])
    with pytest.raises(ValueError, match="got 0 for 1 line[.]"):
        translator.translate(sources[:1], constraints=[])


def test_translate_command_reads_constraints_and_warns_of_unmet_ones(tmp_path, capsys):
    import argparse

    from keras_transformer import export
    from keras_transformer.cli import translate as translate_command
    from tests.export_helpers import tiny_translator

    model, tokenizer = tiny_translator()
    model_dir = export.save_model_and_tokenizer(model, tokenizer, tmp_path / "m")
    sources, _, years = _years(3)
    impossible = " ".join(str(year) for year in range(2000, 2030))
    (tmp_path / "in.txt").write_text("\n".join(sources) + "\n")
    # Line 1 also asks for a phrase outside the vocabulary (issue 35: it was
    # "met" by the unknown piece ⁇, without a warning).
    unknown = "zzzqqq 🦄"
    (tmp_path / "c.txt").write_text(
        f"{years[0][0]}\t{unknown}\n\n{years[2][0]}\t{impossible}\n"
    )
    parser = argparse.ArgumentParser()
    translate_command.add_arguments(parser)
    args = parser.parse_args(
        [
            "--workdir",
            str(model_dir),
            "--input",
            str(tmp_path / "in.txt"),
            "--output",
            str(tmp_path / "out.txt"),
            "--extra-length",
            "3",
            "--constraints-file",
            str(tmp_path / "c.txt"),
            "--no-progress",
        ]  # fmt: skip
    )
    assert translate_command.run(args) == 0
    outputs = (tmp_path / "out.txt").read_text().splitlines()
    assert years[0][0] in outputs[0] and "⁇" not in outputs[0]
    errors = capsys.readouterr().err
    assert "line 3: constraint(s) not met" in errors and impossible in errors
    assert "line 2" not in errors and "line 1: constraint(s) not met" not in errors
    (line,) = [line for line in errors.splitlines() if "line 1" in line]
    assert line.startswith(
        f"keras-transformer translate: warning: line 1: constraint {unknown!r} "
        "cannot be met: "
    )
    assert "'🦄'" in line and f"not in the vocabulary of {model_dir}" in line


def test_phrases_met_as_ops_equals_unmet_phrases():
    from keras_transformer.export import phrases_met

    rng = np.random.default_rng(3)
    token_ids = rng.integers(4, 7, size=(20, 6)).astype("int32")
    lengths = rng.integers(0, 7, size=20).astype("int32")
    phrases = [
        [list(rng.integers(4, 7, size=rng.integers(1, 3))) for _ in range(2)]
        for _ in range(20)
    ]
    met = phrases_met(
        tf.constant(token_ids), tf.constant(lengths), tf.constant(pad_phrases(phrases))
    ).numpy()
    unmet = unmet_phrases(token_ids, lengths, phrases)
    assert [[j for j in range(2) if not met[i, j]] for i in range(20)] == unmet
    assert 0 < met.sum() < met.size


@pytest.mark.slow  # trains the tiny translator (~10 s quiet), decodes
def test_saved_model_translate_constrained_signature(tmp_path):
    from keras_transformer import export
    from keras_transformer.translation import Translator
    from tests.export_helpers import tiny_translator

    model, tokenizer = tiny_translator()
    directory = export.export_translator(
        model, tokenizer, tmp_path / "1", extra_length=3
    )
    sources, _, years = _years(3)
    impossible = " ".join(str(year) for year in range(2000, 2030))
    phrases = [[years[0][0], ""], ["", ""], [years[2][0], impossible]]
    loaded = tf.saved_model.load(str(directory))
    outputs = loaded.signatures["translate_constrained"](
        sentences=tf.constant(sources), phrases=tf.constant(phrases)
    )
    texts = [t.decode() for t in outputs["translations"].numpy()]
    assert outputs["unmet"].numpy().tolist() == [
        [False, False],
        [False, False],
        [False, True],
    ]
    # The same search as the translator's.
    translator = Translator(model, tokenizer, extra_length=3)
    expected = translator.translate(
        sources, constraints=[[p for p in row if p] for row in phrases]
    )
    assert texts == expected
    assert years[0][0] in texts[0] and years[2][0] in texts[2]

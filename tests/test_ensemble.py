"""Ensembles: one search over the average of several models' log-probabilities."""

import re
import shutil

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.conventions import END_ID, PAD_ID, START_ID
from keras_transformer.decoding import Decoder, DecodeSettings, EnsembleDecoder
from keras_transformer.models import build_transformer, presets
from keras_transformer.models.transformer import TransformerStack

SOURCES = np.array([[5, 6, 7, 3], [8, 9, 3, 0], [10, 3, 0, 0]])


def _model(seed, vocabulary_size=32):
    """A one-layer model, small enough to trace fast."""
    keras.utils.set_random_seed(seed)
    return build_transformer(
        presets["tiny"].replace(
            vocabulary_size=vocabulary_size,
            d_model=32,
            d_ff=64,
            num_heads=2,
            num_encoder_layers=1,
            num_decoder_layers=1,
            dropout=0.0,
        )
    )


@pytest.fixture(scope="module")
def models():
    return [_model(7), _model(8)]


@pytest.mark.parametrize("method", ["greedy", "beam"])
def test_an_ensemble_of_one_is_the_model(models, method):
    settings = DecodeSettings(method=method, extra_length=5)
    alone = Decoder(models[0]).decode(SOURCES, settings)
    ensemble = EnsembleDecoder(models[:1]).decode(SOURCES, settings)
    np.testing.assert_array_equal(ensemble.token_ids, alone.token_ids)
    np.testing.assert_array_equal(ensemble.lengths, alone.lengths)
    np.testing.assert_array_equal(ensemble.scores, alone.scores)


def _reference_greedy(models, source, limit):
    """Greedy decoding by the argmax of the averaged log-probabilities, each
    model run on the whole prefix at every step (no caches)."""
    stacks = [TransformerStack.of(model) for model in models]
    source = tf.constant(source[None], tf.int32)
    mask = tf.not_equal(source, PAD_ID)
    encoded = [stack.encode(source, training=False) for stack in stacks]
    prefix, score = [START_ID], 0.0
    for _ in range(limit):
        log_probs = [
            tf.nn.log_softmax(
                stack.decode(tf.constant([prefix]), memory, mask, training=False)[0, -1]
            ).numpy()
            for stack, memory in zip(stacks, encoded, strict=True)
        ]
        average = np.mean(log_probs, axis=0)
        average[PAD_ID] = -np.inf
        token = int(np.argmax(average))
        score += float(average[token])
        prefix.append(token)
        if token == END_ID:
            break
    return prefix[1:], score


def test_an_ensemble_of_two_equals_the_uncached_average(models):
    extra = 5
    result = EnsembleDecoder(models).decode(
        SOURCES, DecodeSettings(method="greedy", extra_length=extra)
    )
    outputs = result.to_list()
    for row, source in enumerate(SOURCES):
        limit = int((source != PAD_ID).sum()) + extra
        expected, score = _reference_greedy(models, source, limit)
        assert outputs[row] == expected
        assert result.scores[row] == pytest.approx(score, abs=1e-4)
    # ... and differs from each model alone (the average is not a copy).
    singles = [
        Decoder(m).decode(SOURCES, DecodeSettings(method="greedy")) for m in models
    ]
    assert any(s.to_list() != outputs for s in singles)


def test_uncached_ensemble_beam_equals_cached(models):
    settings = DecodeSettings(extra_length=4)
    cached = EnsembleDecoder(models).decode(SOURCES, settings)
    uncached = EnsembleDecoder(models, use_cache=False).decode(SOURCES, settings)
    np.testing.assert_array_equal(cached.token_ids, uncached.token_ids)
    np.testing.assert_allclose(cached.scores, uncached.scores, atol=1e-4)


def test_ensemble_with_constraints_meets_them(models):
    constraints = [[[11, 12]], [[13]], [[14, 15]]]
    result = EnsembleDecoder(models).decode(
        SOURCES, DecodeSettings(extra_length=4), constraints=constraints
    )
    assert result.unmet_constraints == [[], [], []]


def test_an_ensemble_of_different_vocabularies_is_refused_in_one_line(models):
    other = _model(9, vocabulary_size=33)
    with pytest.raises(ValueError, match="models 0 and 1 have different vocab"):
        EnsembleDecoder([models[0], other])
    with pytest.raises(ValueError, match="at least one model"):
        EnsembleDecoder([])


def test_translator_from_runs_averages_and_refuses_other_tokenizers(tmp_path):
    from keras_transformer import export
    from keras_transformer.data import SubwordTokenizer, synthetic_dates
    from keras_transformer.translation import Translator
    from tests.export_helpers import tiny_model, tiny_translator

    model, tokenizer = tiny_translator()
    first = export.save_model_and_tokenizer(model, tokenizer, tmp_path / "a")
    sources = list(synthetic_dates(4, seed=21).sources)
    alone = Translator(model, tokenizer).translate(sources)
    # Two copies of one model: the average of equal log-probabilities.
    copy = shutil.copytree(first, tmp_path / "copy")
    twice = Translator.from_runs([first, copy])
    assert len(twice.ensemble) == 1
    assert twice.translate(sources) == alone
    # One folder twice (also by another spelling) is refused before loading.
    for again in (first, tmp_path / "a" / ".." / "a"):
        with pytest.raises(ValueError, match=r"got .*a twice; .*name each run once"):
            Translator.from_runs([first, again])
    pairs = synthetic_dates(200, seed=3)
    other = SubwordTokenizer.train(list(pairs.sources), vocabulary_size=90)
    # A model of the other tokenizer's size: each folder is whole by itself.
    second = export.save_model_and_tokenizer(tiny_model(other), other, tmp_path / "b")
    with pytest.raises(ValueError, match=r"a and .*b have different SentencePiece"):
        Translator.from_runs([first, second])
    # A folder whose model does not fit its own tokenizer is named as such.
    mixed = export.save_model_and_tokenizer(model, other, tmp_path / "mixed")
    with pytest.raises(ValueError, match=r"mixed/model.keras embeds 120 token ids"):
        Translator.from_runs([first, mixed])


@pytest.mark.slow  # trains the tiny translator, traces two translators
def test_translate_command_ensemble_flag(tmp_path, capsys):
    import argparse

    from keras_transformer import export
    from keras_transformer.cli import translate as translate_command
    from keras_transformer.data import synthetic_dates
    from tests.export_helpers import tiny_translator

    model, tokenizer = tiny_translator()
    run = export.save_model_and_tokenizer(model, tokenizer, tmp_path / "a")
    (tmp_path / "in.txt").write_text("\n".join(synthetic_dates(3, seed=4).sources))
    parser = argparse.ArgumentParser()
    translate_command.add_arguments(parser)
    common = ["--workdir", str(run), "--input", str(tmp_path / "in.txt")]
    outputs = {}
    copy = shutil.copytree(run, tmp_path / "copy")
    for name, extra in (("one", []), ("two", ["--ensemble", str(copy)])):
        argv = [*common, "--output", str(tmp_path / name), "--no-progress", *extra]
        assert translate_command.run(parser.parse_args(argv)) == 0
        outputs[name] = (tmp_path / name).read_text()
    # Two copies of one model average to the model itself.
    assert outputs["two"] == outputs["one"] and len(outputs["one"].split("\n")) >= 3
    from keras_transformer.cli._common import CommandError

    # The --workdir run, or one --ensemble run twice, is refused naming it.
    for again, said in (
        (
            ["--ensemble", str(run)],
            f"--ensemble {run} is the --workdir run {run} again",
        ),
        (
            ["--ensemble", str(copy)] * 2,
            f"--ensemble {copy} is --ensemble {copy} again",
        ),
    ):
        argv = [*common, "--output", str(tmp_path / "x"), *again]
        with pytest.raises(CommandError, match=re.escape(said)):
            translate_command.run(parser.parse_args(argv))
    assert not (tmp_path / "x").exists()
    missing = ["--ensemble", str(tmp_path / "nowhere")]
    with pytest.raises(CommandError, match="nowhere"):
        translate_command.run(
            parser.parse_args([*common, "--output", str(tmp_path / "x"), *missing])
        )

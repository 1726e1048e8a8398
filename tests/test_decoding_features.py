"""Decoding features against references: n-best lists (exhaustive search),
forced-decoding scores (the model's forward pass by hand, the beam's own
scores), target prefixes, and top-p sampling (the exact nucleus)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.decoding import Decoder, DecodeSettings
from keras_transformer.decoding.search import run_search
from keras_transformer.decoding.strategies import BeamSearch, NBestBeamSearch
from keras_transformer.decoding.strategies.beam import length_penalty
from keras_transformer.decoding.strategies.greedy import nucleus_filter, sampler

# ------------------------------------------------------------- top-p filter


def _nucleus_reference(logits: np.ndarray, top_p: float) -> np.ndarray:
    """The renormalized nucleus distribution of one row, by brute force:
    the smallest set of most likely tokens whose mass reaches `top_p`."""
    probs = np.exp(logits - logits.max())
    probs /= probs.sum()
    order = np.argsort(-probs)
    kept, mass = [], 0.0
    for token in order:
        kept.append(token)
        mass += probs[token]
        if mass >= top_p:
            break
    nucleus = np.zeros_like(probs)
    nucleus[kept] = probs[kept]
    return nucleus / nucleus.sum()


@pytest.mark.parametrize("top_p", [0.05, 0.3, 0.5, 0.8, 0.95, 1.0])
def test_nucleus_filter_keeps_exactly_the_nucleus(top_p: float) -> None:
    logits = np.random.default_rng(3).normal(size=(16, 9)) * 2.0
    filtered = nucleus_filter(tf.constant(logits, tf.float64), top_p).numpy()
    for row, kept in zip(logits, filtered, strict=True):
        expected = _nucleus_reference(row, top_p)
        assert np.array_equal(np.isfinite(kept), expected > 0)
        probs = np.exp(kept - kept.max())
        np.testing.assert_allclose(probs / probs.sum(), expected, atol=1e-12)


def test_nucleus_filter_ignores_impossible_tokens() -> None:
    logits = tf.math.log(tf.constant([[0.0, 0.6, 0.3, 0.1]], tf.float32))
    kept = np.isfinite(nucleus_filter(logits, 0.85).numpy())
    assert kept.tolist() == [[False, True, True, False]]


def test_top_p_sampling_draws_from_the_renormalized_nucleus() -> None:
    """20,000 draws of one step (temperature 0.7, top-p 0.8) against the
    exact nucleus of the tempered distribution: every frequency within
    5 standard errors, and no token outside the nucleus."""
    draws = 20_000
    log_probs = np.log(np.array([0.02, 0.35, 0.25, 0.2, 0.1, 0.05, 0.03]))
    expected = _nucleus_reference(log_probs / 0.7, 0.8)
    select = sampler(tf.constant(7), 0.7, None, 0.8)
    rows = tf.constant(np.tile(log_probs, (draws, 1)), tf.float32)
    tokens = select(rows, tf.constant(0)).numpy()
    counts = np.bincount(tokens, minlength=len(log_probs)) / draws
    assert np.all(counts[expected == 0] == 0)
    standard_error = np.sqrt(expected * (1 - expected) / draws)
    assert np.all(np.abs(counts - expected) <= 5 * standard_error + 1e-12)


# --------------------------------------------------- n-best vs brute force

START, END, VOCABULARY, LIMIT = 1, 2, 4, 4


def _toy_step(table: tf.Tensor):
    """Log-probabilities that depend on the whole prefix (hashed in the state)."""

    def step(token_ids, codes, index):
        codes = (codes * 1000003 + tf.cast(token_ids, tf.int64) + 1) % 2147483647
        return tf.gather(table, codes % table.shape[0]), codes

    return step


def _toy_table(seed: int) -> np.ndarray:
    logits = np.random.default_rng(seed).normal(size=(211, VOCABULARY)) * 1.5
    return logits - np.log(np.exp(logits).sum(-1, keepdims=True))


def _exhaustive(table: np.ndarray, code: int, alpha: float) -> list[tuple]:
    """Every output ending in END within LIMIT tokens (pad 0 never), scored
    `log P / lp(|Y|)`, best first: `(score, log P, ids)`."""
    hypotheses = []
    for length in range(1, LIMIT + 1):
        for body in itertools.product((1, 3), repeat=length - 1):
            ids, log_p, state, previous = (*body, END), 0.0, code, START
            for token in ids:
                state = (state * 1000003 + previous + 1) % 2147483647
                log_p += table[state % len(table), token]
                previous = token
            hypotheses.append((log_p / length_penalty(length, alpha), log_p, ids))
    return sorted(hypotheses, key=lambda h: -h[0])


@pytest.mark.parametrize("drop", [False, True])
def test_wide_beam_n_best_is_the_exhaustive_top_k(drop: bool) -> None:
    """A beam wider than every hypothesis returns the exhaustive top K
    (GNMT penalty, alpha 0.6), with their scores and raw log-probabilities."""
    table, alpha, beam, k = _toy_table(5), 0.6, 32, 6
    codes = np.array([17, 29, 41], np.int64)

    @tf.function(autograph=False)
    def search(strategy_beam):
        return run_search(
            strategy_beam,
            _toy_step(tf.constant(table, tf.float32)),
            tf.repeat(tf.constant(codes), beam),
            tf.fill([len(codes)], LIMIT),
            max_length=LIMIT,
            start_id=START,
            end_id=END,
            drop_finished=drop,
        )

    token_ids, scores, log_probs, lengths = (
        x.numpy() for x in search(NBestBeamSearch(beam, alpha, k))
    )
    assert token_ids.shape == (len(codes), k, LIMIT)
    for example, code in enumerate(codes):
        expected = _exhaustive(table, int(code), alpha)[:k]
        got = [
            tuple(int(t) for t in ids[:length])
            for ids, length in zip(token_ids[example], lengths[example], strict=True)
        ]
        assert got == [h[2] for h in expected]
        np.testing.assert_allclose(scores[example], [h[0] for h in expected], rtol=1e-5)
        np.testing.assert_allclose(
            log_probs[example], [h[1] for h in expected], rtol=1e-5
        )
    # Its first hypothesis is what beam search returns.
    best_ids, best_scores, best_lengths = (
        x.numpy() for x in search(BeamSearch(beam, alpha))
    )
    np.testing.assert_array_equal(best_ids, token_ids[:, 0])
    np.testing.assert_array_equal(best_scores, scores[:, 0])
    np.testing.assert_array_equal(best_lengths, lengths[:, 0])


def test_n_best_settings_explain_bad_values() -> None:
    with pytest.raises(ValueError, match="n_best=5 is larger than beam_size=4"):
        DecodeSettings(n_best=5)
    with pytest.raises(ValueError, match="n_best=2 needs beam search"):
        DecodeSettings(method="greedy", n_best=2)
    # A beam of one is greedy search: said, as method='beam' alone read as
    # beam search already.
    with pytest.raises(ValueError, match=r"beam_size=1 \(which decodes greedily\)"):
        DecodeSettings(beam_size=1, n_best=2)
    with pytest.raises(ValueError, match="top_p must be in"):
        DecodeSettings(method="sample", top_p=1.5)
    with pytest.raises(ValueError, match="top_p"):
        DecodeSettings(method="sample", top_p=0.0)
    assert DecodeSettings(method="sample", top_p=0.9).describe() == (
        "sample, temperature 1, top-p 0.9"
    )


# ---------------------------------------------- a trained model: the decoder


@pytest.fixture(scope="module")
def trained():
    from tests.export_helpers import tiny_translator

    return tiny_translator()


def _sources(tokenizer, count: int = 6) -> np.ndarray:
    from keras_transformer.data import synthetic_dates

    rows = [
        ids + [tokenizer.END_ID]
        for ids in tokenizer.encode(synthetic_dates(count, seed=31).sources)
    ]
    padded = np.zeros((len(rows), max(map(len, rows))), "int32")
    for i, row in enumerate(rows):
        padded[i, : len(row)] = row
    return padded


def test_score_equals_the_forward_pass_and_the_beams_own_scores(trained) -> None:
    model, tokenizer = trained
    decoder, source = Decoder(model), _sources(tokenizer)
    settings = DecodeSettings(beam_size=4, n_best=3)
    lists = decoder.decode(source, settings, max_length=30, n_best=3)
    targets = [row[:-1] for row in lists.to_lists()[0:1][0]]  # example 0's 3
    repeated = np.repeat(source[:1], 3, axis=0)
    result = decoder.score(repeated, targets)
    # The beam's own raw log-probabilities and length-normalised scores.
    np.testing.assert_allclose(result.log_probs, lists.log_probs[0], atol=2e-4)
    penalties = length_penalty(result.lengths, settings.alpha)
    np.testing.assert_allclose(result.log_probs / penalties, lists.scores[0], atol=2e-4)
    # The model's forward pass, log-softmax gathered by hand (float64).
    for row, target in enumerate(targets):
        inputs = np.array([[tokenizer.START_ID, *target]], "int32")
        logits = np.asarray(model((repeated[row : row + 1], inputs)), "float64")[0]
        log_softmax = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
        labels = [*target, tokenizer.END_ID]
        by_hand = log_softmax[np.arange(len(labels)), labels]
        np.testing.assert_allclose(result.to_list()[row], by_hand, atol=1e-5)
        assert result.lengths[row] == len(labels)


def test_prefix_of_the_greedy_output_gives_the_greedy_output(trained) -> None:
    model, tokenizer = trained
    decoder, source = Decoder(model), _sources(tokenizer)
    greedy = DecodeSettings(method="greedy")
    free = decoder.decode(source, greedy, max_length=30).to_list()
    prefixes = [row[: 1 + i % 3] for i, row in enumerate(free)]
    forced = decoder.decode(source, greedy, max_length=30, prefixes=prefixes)
    assert forced.to_list() == free
    # Another prefix: every output starts with it (beam search too).
    other = [[tokenizer.encode(["1999"])[0][0]]] * len(source)
    for settings in (greedy, DecodeSettings(beam_size=3)):
        outputs = decoder.decode(source, settings, max_length=30, prefixes=other)
        assert all(row[:1] == other[0] for row in outputs.to_list())
    with pytest.raises(ValueError, match="one id list per source"):
        decoder.decode(source, greedy, prefixes=other[:2])


# ------------------------------------------- the translator and the commands


@pytest.fixture(scope="module")
def model_dir(trained, tmp_path_factory: pytest.TempPathFactory):
    from keras_transformer import export

    model, tokenizer = trained
    return export.save_model_and_tokenizer(
        model, tokenizer, tmp_path_factory.mktemp("model")
    )


def _lines(count: int = 5) -> list[str]:
    from keras_transformer.data import synthetic_dates

    return list(synthetic_dates(count, seed=41).sources)


@pytest.mark.slow
def test_translator_n_best_prefixes_and_score(trained) -> None:
    from keras_transformer.translation import Translator

    model, tokenizer = trained
    translator = Translator(model, tokenizer)
    lines = [*_lines(4), ""]
    best = translator.translate(lines)
    lists = translator.translate(lines, n_best=3)
    assert [hypotheses[0][0] for hypotheses in lists] == best
    assert lists[-1] == [("", 0.0)]
    for hypotheses in lists[:-1]:
        scores = [score for _, score in hypotheses]
        assert len(hypotheses) == 3 and scores == sorted(scores, reverse=True)
    # Scoring the best translations gives the beam's raw log-probabilities.
    scored = translator.score(lines[:4], best[:4])
    for (_, score), result in zip([h[0] for h in lists[:4]], scored, strict=True):
        penalty = length_penalty(len(result.token_log_probs), translator.alpha)
        assert result.log_prob / penalty == pytest.approx(score, abs=2e-4)
        assert result.log_prob == pytest.approx(sum(result.token_log_probs), abs=1e-4)
    # Prefixes (text): each translation starts with its own.
    prefixes = ["1999", "", "2001", "12", ""]
    forced = translator.translate(lines, prefixes=prefixes)
    for prefix, text, free, line in zip(prefixes, forced, best, lines, strict=True):
        assert text.startswith(prefix) if line else text == ""
        if not prefix:
            assert text == free
    with pytest.raises(ValueError, match="one prefix per line"):
        translator.translate(lines, prefixes=prefixes[:2])
    with pytest.raises(ValueError, match="n_best=5 is larger than beam_size=4"):
        translator.translate(lines, n_best=5)


@pytest.mark.slow
def test_sampling_with_a_seed_is_reproducible(trained) -> None:
    from keras_transformer.translation import Translator

    model, tokenizer = trained
    lines = _lines(4)
    sample = dict(method="sample", temperature=1.5, top_k=20, top_p=0.9)
    first = Translator(model, tokenizer, seed=3, **sample).translate(lines)
    again = Translator(model, tokenizer, seed=3, **sample).translate(lines)
    other = Translator(model, tokenizer, seed=4, **sample).translate(lines)
    assert first == again and first != other
    # top_p so small that only the most likely token remains: greedy.
    nucleus = Translator(model, tokenizer, seed=5, method="sample", top_p=1e-6)
    assert nucleus.translate(lines) == Translator(
        model, tokenizer, beam_size=1
    ).translate(lines)


def _parse(add_arguments, argv: list[str]):
    import argparse

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(argv)


@pytest.mark.slow
def test_translate_command_n_best_and_prefixes(
    trained, model_dir, tmp_path, capfd, monkeypatch
) -> None:
    import io

    from keras_transformer.cli import translate as translate_command
    from keras_transformer.translation import Translator

    model, tokenizer = trained
    lines = _lines(3)
    source = tmp_path / "source.txt"
    source.write_text("".join(f"{x}\n" for x in lines), encoding="utf-8")
    argv = ["--workdir", str(model_dir), "--input", str(source), "--n-best", "2"]
    assert translate_command.run(_parse(translate_command.add_arguments, argv)) == 0
    printed = capfd.readouterr().out.splitlines()
    lists = Translator(model, tokenizer).translate(lines, n_best=2)
    assert printed == [
        f"{i} ||| {text} ||| {score:.4f}"
        for i, hypotheses in enumerate(lists)
        for text, score in hypotheses
    ]
    # Prefixes as a tab-separated column of standard input.
    stdin = "".join(f"{line}\t1999\n" for line in lines)
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(stdin.encode())))
    argv = ["--workdir", str(model_dir), "--prefix-column", "--beam-size", "1"]
    assert translate_command.run(_parse(translate_command.add_arguments, argv)) == 0
    outputs = capfd.readouterr().out.splitlines()
    assert len(outputs) == 3 and all(text.startswith("1999") for text in outputs)
    prefix_file = tmp_path / "prefixes.txt"
    prefix_file.write_text("1999\n", encoding="utf-8")
    argv = ["--workdir", str(model_dir), "--input", str(source)]
    argv += ["--prefix-file", str(prefix_file)]
    with pytest.raises(Exception, match="has 1 line but the input has 3"):
        translate_command.run(_parse(translate_command.add_arguments, argv))


@pytest.mark.slow
def test_score_command_reads_pairs_and_prints_log_probabilities(
    trained, model_dir, tmp_path, capfd, monkeypatch
) -> None:
    import io

    from keras_transformer.cli import score as score_command
    from keras_transformer.translation import Translator

    model, tokenizer = trained
    lines = _lines(3)
    targets = Translator(model, tokenizer).translate(lines)
    stdin = "".join(f"{s}\t{t}\n" for s, t in zip(lines, targets, strict=True))
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(stdin.encode())))
    args = _parse(score_command.add_arguments, ["--workdir", str(model_dir)])
    assert score_command.run(args) == 0
    printed = capfd.readouterr().out.splitlines()
    expected = Translator(model, tokenizer).score(lines, targets)
    assert len(printed) == 3
    for line, result in zip(printed, expected, strict=True):
        total, tokens = line.split("\t")
        assert float(total) == pytest.approx(result.log_prob, abs=1e-4)
        assert [float(x) for x in tokens.split()] == pytest.approx(
            result.token_log_probs, abs=1e-4
        )
    # The same pairs as two files; a line without a tab is refused.
    source, target = tmp_path / "s.txt", tmp_path / "t.txt"
    source.write_text("".join(f"{x}\n" for x in lines), encoding="utf-8")
    target.write_text("".join(f"{x}\n" for x in targets), encoding="utf-8")
    argv = ["--workdir", str(model_dir), "--source", str(source)]
    assert (
        score_command.run(
            _parse(score_command.add_arguments, [*argv, "--target", str(target)])
        )
        == 0
    )
    assert capfd.readouterr().out.splitlines() == printed
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"no tab\n")))
    args = _parse(score_command.add_arguments, ["--workdir", str(model_dir)])
    with pytest.raises(Exception, match="line 1 has no tab"):
        score_command.run(args)


@pytest.mark.slow
def test_the_saved_model_serves_n_best_score_and_prefixes(trained, tmp_path) -> None:
    from keras_transformer import export
    from keras_transformer.translation import Translator

    model, tokenizer = trained
    path = export.export_translator(model, tokenizer, tmp_path / "1", beam_size=3)
    loaded = tf.saved_model.load(str(path))
    lines = [*_lines(3), ""]
    sentences = tf.constant(lines)
    served = loaded.signatures["serving_default"](sentences=sentences)
    translator = Translator(model, tokenizer, beam_size=3)
    # n-best: [batch, 3], its first column is serving_default's output.
    n_best = loaded.signatures["n_best"](sentences=sentences)
    texts = n_best["translations"].numpy().astype(str)
    assert texts.shape == (4, 3)
    assert texts[:, 0].tolist() == served["translations"].numpy().astype(str).tolist()
    np.testing.assert_allclose(n_best["scores"][:, 0], served["scores"], atol=1e-5)
    lists = translator.translate(lines[:3], n_best=3)
    assert texts[:3].tolist() == [[t for t, _ in h] for h in lists]
    np.testing.assert_allclose(
        n_best["scores"][:3], [[s for _, s in h] for h in lists], atol=1e-4
    )
    # score: forced decoding of the served translations.
    best = texts[:3, 0].tolist()
    scored = loaded.signatures["score"](
        sentences=tf.constant(lines[:3]), targets=tf.constant(best)
    )
    expected = translator.score(lines[:3], best)
    np.testing.assert_allclose(
        scored["scores"], [s.log_prob for s in expected], atol=1e-4
    )
    assert scored["lengths"].numpy().tolist() == [
        len(s.token_log_probs) for s in expected
    ]
    # Prefixes: each output starts with its own; none gives serving_default's.
    prefixes = ["1999", "", "12", ""]
    forced = (
        loaded.signatures["translate_with_prefix"](
            sentences=sentences, prefixes=tf.constant(prefixes)
        )["translations"]
        .numpy()
        .astype(str)
    )
    assert forced.tolist() == translator.translate(lines, prefixes=prefixes)
    assert forced[0].startswith("1999") and forced[2].startswith("12")
    assert forced[1] == texts[1, 0]

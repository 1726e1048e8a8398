"""Tests of keras_transformer.data.batching (§5.1 token-budget batching)."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.data import (
    SubwordTokenizer,
    TextPairs,
    batch_for_eval,
    bucket_batch_sizes,
    count_too_long,
    make_translation_dataset,
)

BOUNDARIES = (8, 16, 24, 32, 48, 64)
BUDGET = 1024


def collect(
    dataset: tf.data.Dataset,
) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    return [(s, t, y) for (s, t), y in dataset.as_numpy_iterator()]


def real_lengths(batch: np.ndarray) -> np.ndarray:
    return (batch != 0).sum(axis=1)


@pytest.fixture(scope="module")
def batches(multi30k_val: TextPairs, tokenizer: SubwordTokenizer):
    dataset = make_translation_dataset(
        multi30k_val,
        tokenizer,
        max_tokens_per_batch=BUDGET,
        bucket_boundaries=BOUNDARIES,
        max_sentence_length=48,
        shuffle=False,
    )
    return collect(dataset)


def test_batches_follow_the_token_budget(batches) -> None:
    assert len({s.shape for s, _, _ in batches}) > 3  # several buckets in use
    for source, target_input, labels in batches:
        assert source.dtype == target_input.dtype == labels.dtype == np.int32
        batch, length = source.shape
        assert target_input.shape == labels.shape == (batch, length)
        assert length in BOUNDARIES and length <= 48
        assert batch * length <= BUDGET
        # The bucket is the smallest that holds the longer side.
        longest = max(real_lengths(source).max(), real_lengths(labels).max())
        assert longest <= length
        assert (
            length == BOUNDARIES[0]
            or longest > BOUNDARIES[BOUNDARIES.index(length) - 1]
        )


def test_special_ids_and_teacher_forcing(batches, tokenizer: SubwordTokenizer) -> None:
    start, end = tokenizer.START_ID, tokenizer.END_ID
    for source, target_input, labels in batches:
        assert (target_input[:, 0] == start).all()
        for s, t, y in zip(source, target_input, labels, strict=True):
            n_source, n_target = real_lengths(s[None])[0], real_lengths(y[None])[0]
            assert s[n_source - 1] == end and end not in s[: n_source - 1]
            assert (s[n_source:] == 0).all()
            assert y[n_target - 1] == end and (y[n_target:] == 0).all()
            assert real_lengths(t[None])[0] == n_target
            np.testing.assert_array_equal(t[1:n_target], y[: n_target - 1])


def test_every_pair_appears_once_and_order_is_deterministic(
    batches, multi30k_val: TextPairs, tokenizer: SubwordTokenizer
) -> None:
    report = count_too_long(multi30k_val, tokenizer, 48)
    assert (
        sum(s.shape[0] for s, _, _ in batches)
        == len(multi30k_val) - report.num_too_long
    )
    again = collect(
        make_translation_dataset(
            multi30k_val,
            tokenizer,
            max_tokens_per_batch=BUDGET,
            bucket_boundaries=BOUNDARIES,
            max_sentence_length=48,
            shuffle=False,
        )
    )
    assert len(again) == len(batches)
    for a, b in zip(again, batches, strict=True):
        for x, y in zip(a, b, strict=True):
            np.testing.assert_array_equal(x, y)
    decoded = tokenizer.detokenize(
        np.concatenate([s[:, :8] for s, _, _ in batches[:1]])
    )
    assert all(isinstance(text, bytes) for text in decoded.numpy())


def test_shuffled_with_seed_is_reproducible(
    multi30k_val: TextPairs, tokenizer: SubwordTokenizer
) -> None:
    pairs = multi30k_val.take(300)

    def first_sources(seed: int) -> list[list[int]]:
        dataset = make_translation_dataset(
            pairs,
            tokenizer,
            max_tokens_per_batch=BUDGET,
            seed=seed,
            max_sentence_length=64,
        )
        return [s.tolist() for (s, _), _ in dataset.take(3).as_numpy_iterator()]

    assert first_sources(1) == first_sources(1)
    assert first_sources(1) != first_sources(2)


def test_too_long_counted_dropped_or_truncated(
    multi30k_val: TextPairs,
    tokenizer: SubwordTokenizer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    pairs = multi30k_val.take(200)
    encoded_sources = tokenizer.encode(list(pairs.sources))
    encoded_targets = tokenizer.encode(list(pairs.targets))
    max_length = 16
    expected = sum(
        len(s) + 1 > max_length or len(t) + 1 > max_length
        for s, t in zip(encoded_sources, encoded_targets, strict=True)
    )
    report = count_too_long(pairs, tokenizer, max_length)
    assert 0 < report.num_too_long == expected < len(pairs)
    assert report.num_pairs == 200 and report.max_length == max_length
    assert report.longest_source == max(len(s) for s in encoded_sources) + 1
    assert count_too_long(pairs.to_dataset(), tokenizer, max_length) == report
    assert f"{expected} of 200 pairs" in str(report)

    kwargs = dict(max_tokens_per_batch=256, bucket_boundaries=(8, 16), shuffle=False)
    with caplog.at_level(logging.WARNING, logger="keras_transformer.data.batching"):
        dropped = collect(
            make_translation_dataset(pairs, tokenizer, max_sentence_length=16, **kwargs)
        )
    assert f"dropping: {expected} of 200 pairs" in caplog.text
    assert sum(s.shape[0] for s, _, _ in dropped) == 200 - expected

    truncated = collect(
        make_translation_dataset(
            pairs, tokenizer, max_sentence_length=16, too_long="truncate", **kwargs
        )
    )
    assert sum(s.shape[0] for s, _, _ in truncated) == 200
    for source, _, labels in truncated:
        assert source.shape[1] <= 16
        for row in (*source, *labels):
            assert row[real_lengths(row[None])[0] - 1] == tokenizer.END_ID

    streamed = collect(
        make_translation_dataset(
            pairs.to_dataset(), tokenizer, max_sentence_length=16, **kwargs
        )
    )
    assert sum(s.shape[0] for s, _, _ in streamed) == 200 - expected


def test_repeat_and_drop_remainder(
    multi30k_val: TextPairs, tokenizer: SubwordTokenizer
) -> None:
    dataset = make_translation_dataset(
        multi30k_val.take(100),
        tokenizer,
        max_tokens_per_batch=BUDGET,
        repeat=True,
        drop_remainder=True,
        seed=0,
    )
    for (source, _), _ in dataset.take(20):
        assert source.shape[0] == BUDGET // source.shape[1]


def test_bucket_batch_sizes_and_argument_errors(tokenizer: SubwordTokenizer) -> None:
    assert bucket_batch_sizes(4096, (8, 16, 24, 32, 48, 64, 96, 128), 50) == {
        8: 512,
        16: 256,
        24: 170,
        32: 128,
        48: 85,
        64: 64,
    }
    with pytest.raises(
        ValueError, match="max_length=200 exceeds the largest bucket boundary 128"
    ):
        bucket_batch_sizes(4096, (8, 128), 200)
    with pytest.raises(ValueError, match="strictly increasing"):
        bucket_batch_sizes(4096, (16, 8, 32), 32)
    with pytest.raises(ValueError, match="raise max_tokens_per_batch to at least 128"):
        bucket_batch_sizes(100, (8, 128), 128)
    pairs = TextPairs(("Ein Hund.",), ("A dog.",))
    with pytest.raises(ValueError, match="too_long='cut'"):
        make_translation_dataset(pairs, tokenizer, too_long="cut")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="element_spec"):
        make_translation_dataset(tf.data.Dataset.range(3), tokenizer)
    with pytest.raises(ValueError, match="All pairs are too long.*too_long='truncate'"):
        make_translation_dataset(
            TextPairs(("Ein sehr langer Satz über Hunde.",), ("x",)),
            tokenizer,
            max_sentence_length=3,
        )


def test_batch_for_eval_keeps_order(
    multi30k_val: TextPairs, tokenizer: SubwordTokenizer
) -> None:
    pairs = multi30k_val.take(70)
    batches = list(
        batch_for_eval(
            pairs, tokenizer, batch_size=32, max_length=64
        ).as_numpy_iterator()
    )
    assert [s.shape[0] for s, _ in batches] == [32, 32, 6]
    references = [r.decode() for _, refs in batches for r in refs]
    assert references == list(pairs.targets)
    sources = [row for s, _ in batches for row in s]
    expected = tokenizer.encode(list(pairs.sources))
    for row, ids in zip(sources, expected, strict=True):
        n = min(len(ids), 63)  # truncated to max_length=64, END included
        assert row[:n].tolist() == ids[:n] and row[n] == tokenizer.END_ID
        assert (row[n + 1 :] == 0).all()
    assert any(len(ids) > 63 for ids in expected)  # one source is truncated
    for source, _ in batches:
        assert source.shape[1] in (8, 16, 24, 32, 48, 64)
    # max_length between two boundaries pads up to the next boundary.
    (short,) = [s for s, _ in batch_for_eval(pairs.take(5), tokenizer, max_length=50)]
    assert short.shape[0] == 5 and short.shape[1] in (8, 16, 24, 32, 48, 64)

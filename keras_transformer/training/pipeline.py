"""The data side of a run: sentence pairs, the shared tokenizer, `tf.data` pipelines.

The pairs come from the task registry (`kt.data.tasks`); `TaskData` is
re-exported here for compatibility.
"""

from __future__ import annotations

import logging
from typing import Any

import tensorflow as tf

from keras_transformer.data import SubwordTokenizer, TextPairs, make_translation_dataset
from keras_transformer.data.tasks import TaskData, get_task
from keras_transformer.training.sections import DataConfig
from keras_transformer.training.trainer import accumulation_dataset

__all__ = [
    "TaskData",
    "count_updates",
    "learn_tokenizer",
    "load_task",
    "training_dataset",
    "validation_dataset",
]

logger = logging.getLogger(__name__)


def load_task(config: DataConfig, seed: int = 0) -> TaskData:
    """Loads (or generates) the train, validation and test pairs of a task.

    A thin user of the task registry (`kt.data.tasks`), kept for its name.

    Args:
        config: the data settings (`config.task` names the task).
        seed: seed of the synthetic dates (the validation and test splits
            use their own seeds derived from it).

    Returns:
        The `TaskData`.
    """
    return get_task(config.task).load(config, seed=seed)


def learn_tokenizer(
    pairs: TextPairs, config: DataConfig, seed: int = 0
) -> SubwordTokenizer:
    """Learns the shared source-target subword vocabulary on the training pairs.

    §5.1: "Sentences were encoded using byte-pair encoding, which has a
    shared source-target vocabulary". SentencePiece's unigram model (or BPE,
    `data.tokenizer_model_type`) is learned on the source and target sides
    together. The result is a function of the pairs, `config` and `seed`
    (byte-identical in every process): `data.tokenizer_max_sentences` samples
    with `seed`, and training is single-threaded (the thread count changes
    the vocabulary).
    """
    return SubwordTokenizer.train(
        [*pairs.sources, *pairs.targets],
        vocabulary_size=config.vocabulary_size,
        model_type=config.tokenizer_model_type,  # type: ignore[arg-type]
        seed=seed,
        max_sentences=config.tokenizer_max_sentences,
        num_threads=1,
    )


def _distribution_options(dataset: tf.data.Dataset) -> tf.data.Dataset:
    """Shards by data (every worker reads all batches and keeps its slice)."""
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = (
        tf.data.experimental.AutoShardPolicy.DATA
    )
    return dataset.with_options(options)


def training_dataset(
    pairs: TextPairs,
    tokenizer: SubwordTokenizer,
    config: DataConfig,
    *,
    accumulation: int = 1,
    seed: int = 0,
    skip_updates: int = 0,
) -> tf.data.Dataset:
    """The endless, shuffled, token-bucketed training stream, one element per update.

    The order is a function of `seed` only, so a resumed run that skips the
    `skip_updates` elements it already trained on sees exactly the data an
    uninterrupted run would.

    Args:
        pairs: the training pairs.
        tokenizer: the shared tokenizer.
        config: the data settings (budget, buckets, lengths).
        accumulation: `k`; with `k > 1` each element holds `k` batches (see
            `accumulation_dataset`).
        seed: the shuffle seed.
        skip_updates: elements to skip (updates already done).
    """
    dataset = _bucketed(
        pairs,
        tokenizer,
        config,
        accumulation=accumulation,
        shuffle=True,
        shuffle_buffer=config.shuffle_buffer,
        seed=seed,
        repeat=True,
    )
    dataset = accumulation_dataset(dataset, accumulation)
    if skip_updates:
        dataset = dataset.skip(skip_updates)
    return _distribution_options(dataset)


def validation_dataset(
    pairs: TextPairs, tokenizer: SubwordTokenizer, config: DataConfig
) -> tf.data.Dataset:
    """One deterministic pass over the validation pairs (too-long ones truncated)."""
    dataset = _bucketed(pairs, tokenizer, config, too_long="truncate")
    # A known length spares Keras' "ran out of data" warning after each pass.
    dataset = dataset.apply(
        tf.data.experimental.assert_cardinality(_count_batches(dataset))
    )
    return _distribution_options(dataset)


def count_updates(
    pairs: TextPairs,
    tokenizer: SubwordTokenizer,
    config: DataConfig,
    accumulation: int = 1,
) -> int:
    """Optimizer updates in one pass over `pairs` (the default epoch length)."""
    dataset = _bucketed(pairs, tokenizer, config, accumulation=accumulation)
    return max(1, _count_batches(dataset))


def _bucketed(
    pairs: TextPairs,
    tokenizer: SubwordTokenizer,
    config: DataConfig,
    *,
    accumulation: int = 1,
    too_long: str | None = None,
    shuffle: bool = False,
    repeat: bool = False,
    **options: Any,
) -> tf.data.Dataset:
    """`make_translation_dataset` with the budget, buckets and lengths of
    `config`; an update of `accumulation` batches gets their joint budget."""
    return make_translation_dataset(
        pairs,
        tokenizer,
        max_tokens_per_batch=config.max_tokens_per_batch * accumulation,
        bucket_boundaries=config.bucket_boundaries,
        max_sentence_length=config.max_sentence_length,
        too_long=too_long or config.too_long,  # type: ignore[arg-type]
        shuffle=shuffle,
        repeat=repeat,
        **options,
    )


def _count_batches(dataset: tf.data.Dataset) -> int:
    """The number of elements of a finite dataset (one pass over it)."""
    return int(dataset.reduce(0, lambda count, _: count + 1))

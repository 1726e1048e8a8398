"""Token-budget batching of sentence pairs, as in the Transformer paper.

Vaswani et al. (2017), §5.1: "Sentence pairs were batched together by
approximate sequence length. Each training batch contained a set of sentence
pairs containing approximately 25000 source tokens and 25000 target tokens."

:func:`make_translation_dataset` does this with ``tf.data``: pairs are
tokenized, grouped into length buckets, and each bucket is batched with as
many pairs as fit a token budget, every sequence padded to the bucket's
boundary. Only a few distinct batch shapes occur, so a compiled (XLA) train
step is traced once per bucket rather than once per sentence length.

Length conventions (all lengths count tokens after the special ids are added):

* source ids: ``x + [END]``;
* target input ids (teacher forcing): ``[START] + y``;
* target label ids: ``y + [END]``, the same length as the target input.

A pair is *too long* when ``len(x) + 1`` or ``len(y) + 1`` exceeds
``max_length``. Such pairs are dropped or truncated; how many is reported by
:func:`count_too_long` (and logged by :func:`make_translation_dataset` when it
is given :class:`~keras_transformer.data.TextPairs`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from typing import Literal

import numpy as np
import tensorflow as tf

from keras_transformer.data.text import TextPairs
from keras_transformer.data.tokenizer import SubwordTokenizer

__all__ = [
    "DEFAULT_BUCKET_BOUNDARIES",
    "DEFAULT_MAX_TOKENS_PER_BATCH",
    "LengthReport",
    "batch_for_eval",
    "bucket_batch_sizes",
    "count_too_long",
    "encode_sources",
    "make_translation_dataset",
]

logger = logging.getLogger(__name__)

#: Default bucket lengths (tokens, special ids included).
DEFAULT_BUCKET_BOUNDARIES = (8, 16, 24, 32, 48, 64, 96, 128)
#: Default token budget of one batch and side, padding included.
DEFAULT_MAX_TOKENS_PER_BATCH = 4096

_TOKENIZE_CHUNK = 4096
_DEFAULT_STREAM_SHUFFLE_BUFFER = 16_384

PairsLike = TextPairs | tf.data.Dataset


@dataclasses.dataclass(frozen=True)
class LengthReport:
    """How many sentence pairs exceed a maximum length.

    Attributes:
        num_pairs: Pairs examined.
        num_too_long: Pairs with a source or target over ``max_length``; the
            pairs :func:`make_translation_dataset` drops (or truncates).
        num_source_too_long: Pairs whose source is over ``max_length``.
        num_target_too_long: Pairs whose target is over ``max_length``.
        max_length: The limit, in tokens including the END (or START) id.
        longest_source: Longest source seen, in tokens including END.
        longest_target: Longest target seen, in tokens including END.
    """

    num_pairs: int
    num_too_long: int
    num_source_too_long: int
    num_target_too_long: int
    max_length: int
    longest_source: int
    longest_target: int

    @property
    def fraction_too_long(self) -> float:
        """Share of the pairs that are too long (0.0 for no pairs)."""
        return self.num_too_long / self.num_pairs if self.num_pairs else 0.0

    def __str__(self) -> str:
        return (
            f"{self.num_too_long} of {self.num_pairs} pairs "
            f"({100 * self.fraction_too_long:.2f}%) are longer than "
            f"max_length={self.max_length} tokens ({self.num_source_too_long} by "
            f"source, {self.num_target_too_long} by target; longest source "
            f"{self.longest_source}, longest target {self.longest_target})"
        )


# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------


def _check_string_pairs(dataset: tf.data.Dataset) -> None:
    spec = dataset.element_spec
    ok = (
        isinstance(spec, tuple)
        and len(spec) == 2
        and all(
            isinstance(s, tf.TensorSpec) and s.dtype == tf.string and s.shape.rank == 0
            for s in spec
        )
    )
    if not ok:
        raise ValueError(
            "Expected a tf.data.Dataset of (source, target) scalar tf.string "
            f"pairs, got element_spec={spec}. Build one with "
            "TextPairs.to_dataset(), or map your dataset to (source, target) "
            "strings first."
        )


def _resolve(
    tokenizer: SubwordTokenizer, target_tokenizer: SubwordTokenizer | None
) -> SubwordTokenizer:
    return tokenizer if target_tokenizer is None else target_tokenizer


def _tokenize_pairs(
    pairs: TextPairs,
    tokenizer: SubwordTokenizer,
    target_tokenizer: SubwordTokenizer | None,
) -> tuple[tf.RaggedTensor, tf.RaggedTensor]:
    """Tokenizes all pairs eagerly, in chunks, into two ragged int32 tensors."""
    target_tokenizer = _resolve(tokenizer, target_tokenizer)
    sources, targets = [], []
    for start in range(0, len(pairs), _TOKENIZE_CHUNK):
        stop = start + _TOKENIZE_CHUNK
        sources.append(tokenizer.tokenize(list(pairs.sources[start:stop])))
        targets.append(target_tokenizer.tokenize(list(pairs.targets[start:stop])))
    if not sources:
        empty = tf.RaggedTensor.from_row_lengths(
            tf.zeros([0], tf.int32), tf.zeros([0], tf.int64)
        )
        return empty, empty
    return tf.concat(sources, axis=0), tf.concat(targets, axis=0)


def _tokenize_stream(
    dataset: tf.data.Dataset,
    tokenizer: SubwordTokenizer,
    target_tokenizer: SubwordTokenizer | None,
) -> tf.data.Dataset:
    """Maps a dataset of string pairs to a dataset of 1-D int32 id pairs."""
    target_tokenizer = _resolve(tokenizer, target_tokenizer)

    def tokenize(sources: tf.Tensor, targets: tf.Tensor):
        return tokenizer.tokenize(sources), target_tokenizer.tokenize(targets)

    return (
        dataset.batch(256).map(tokenize, num_parallel_calls=tf.data.AUTOTUNE).unbatch()
    )


def _report(
    source_lengths: Sequence[int] | tf.Tensor,
    target_lengths: Sequence[int] | tf.Tensor,
    max_length: int,
) -> LengthReport:
    """Builds a report from token counts *without* special ids."""
    source = np.asarray(source_lengths, dtype=np.int64) + 1
    target = np.asarray(target_lengths, dtype=np.int64) + 1
    source_over = source > max_length
    target_over = target > max_length
    return LengthReport(
        num_pairs=int(source.size),
        num_too_long=int(np.count_nonzero(source_over | target_over)),
        num_source_too_long=int(np.count_nonzero(source_over)),
        num_target_too_long=int(np.count_nonzero(target_over)),
        max_length=max_length,
        longest_source=int(source.max(initial=0)),
        longest_target=int(target.max(initial=0)),
    )


def _check_max_length(max_length: int) -> None:
    if max_length < 2:
        raise ValueError(
            f"max_length must be at least 2 (one token plus the END id), got "
            f"{max_length}."
        )


def _used_boundaries(bucket_boundaries: Sequence[int], max_length: int) -> list[int]:
    """Validates the boundaries; returns those up to the first >= max_length."""
    _check_max_length(max_length)
    boundaries = [int(b) for b in bucket_boundaries]
    if not boundaries or boundaries[0] < 1:
        raise ValueError(
            f"bucket_boundaries must be non-empty positive lengths, got "
            f"{tuple(bucket_boundaries)}."
        )
    if any(b >= c for b, c in zip(boundaries, boundaries[1:], strict=False)):
        raise ValueError(
            f"bucket_boundaries must be strictly increasing, got "
            f"{tuple(bucket_boundaries)}; sort them and remove duplicates."
        )
    if max_length > boundaries[-1]:
        raise ValueError(
            f"max_length={max_length} exceeds the largest bucket boundary "
            f"{boundaries[-1]}; add a boundary >= {max_length} to "
            "bucket_boundaries or lower max_length."
        )
    used = [b for b in boundaries if b < max_length]
    used.append(next(b for b in boundaries if b >= max_length))
    return used


def bucket_batch_sizes(
    max_tokens_per_batch: int,
    bucket_boundaries: Sequence[int] = DEFAULT_BUCKET_BOUNDARIES,
    max_length: int = 128,
) -> dict[int, int]:
    """Returns the batch size of each bucket under a token budget.

    Buckets longer than needed for ``max_length`` are left out: the last
    bucket is the first boundary ``>= max_length``.

    Args:
        max_tokens_per_batch: Token budget per batch and per side, padding
            included: ``batch_size * bucket_length <= max_tokens_per_batch``.
        bucket_boundaries: Strictly increasing bucket lengths.
        max_length: Longest sequence, in tokens including END/START.

    Returns:
        ``{bucket_length: batch_size}``, in increasing bucket length.

    Raises:
        ValueError: If the boundaries are not increasing, ``max_length``
            exceeds the largest boundary, or the budget cannot hold one
            sequence of some bucket.
    """
    used = _used_boundaries(bucket_boundaries, max_length)
    sizes = {b: max_tokens_per_batch // b for b in used}
    if sizes[used[-1]] < 1:
        raise ValueError(
            f"max_tokens_per_batch={max_tokens_per_batch} cannot hold one "
            f"sequence of the {used[-1]}-token bucket; raise max_tokens_per_batch "
            f"to at least {used[-1]} or lower max_length."
        )
    return sizes


# ---------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------


def count_too_long(
    pairs: PairsLike,
    tokenizer: SubwordTokenizer,
    max_length: int = 128,
    *,
    target_tokenizer: SubwordTokenizer | None = None,
) -> LengthReport:
    """Counts the pairs that exceed ``max_length`` tokens.

    This is the number of pairs :func:`make_translation_dataset` drops with
    ``too_long="drop"`` or truncates with ``too_long="truncate"``.

    Args:
        pairs: :class:`~keras_transformer.data.TextPairs`, or a finite
            ``tf.data.Dataset`` of ``(source, target)`` scalar strings.
        tokenizer: Tokenizer of the sources (and of the targets, unless
            ``target_tokenizer`` is given).
        max_length: Longest allowed sequence, in tokens including the END id
            (source, label) or the START id (target input).
        target_tokenizer: Tokenizer of the targets, if it differs.

    Returns:
        A :class:`LengthReport`.
    """
    _check_max_length(max_length)
    if isinstance(pairs, TextPairs):
        source_ids, target_ids = _tokenize_pairs(pairs, tokenizer, target_tokenizer)
        return _report(source_ids.row_lengths(), target_ids.row_lengths(), max_length)
    if not isinstance(pairs, tf.data.Dataset):
        raise TypeError(
            f"pairs must be TextPairs or a tf.data.Dataset, got {type(pairs).__name__}."
        )
    _check_string_pairs(pairs)
    lengths = _tokenize_stream(pairs, tokenizer, target_tokenizer).map(
        lambda s, t: (tf.size(s), tf.size(t))
    )
    source_lengths: list[int] = []
    target_lengths: list[int] = []
    for s, t in lengths.batch(_TOKENIZE_CHUNK).as_numpy_iterator():
        source_lengths.extend(s.tolist())
        target_lengths.extend(t.tolist())
    return _report(source_lengths, target_lengths, max_length)


def make_translation_dataset(
    pairs: PairsLike,
    tokenizer: SubwordTokenizer,
    *,
    max_tokens_per_batch: int = DEFAULT_MAX_TOKENS_PER_BATCH,
    bucket_boundaries: Sequence[int] = DEFAULT_BUCKET_BOUNDARIES,
    max_sentence_length: int = 128,
    too_long: Literal["drop", "truncate"] = "drop",
    shuffle: bool = True,
    shuffle_buffer: int | None = None,
    seed: int | None = None,
    repeat: bool = False,
    drop_remainder: bool = False,
    target_tokenizer: SubwordTokenizer | None = None,
) -> tf.data.Dataset:
    """Builds the training pipeline: tokenize, bucket by length, batch, pad.

    Following the paper (§5.1), pairs of similar length are batched together
    and batch sizes follow a token budget rather than a fixed number of
    pairs. A pair goes to the smallest bucket whose length holds both its
    source and its target, and both are padded with ``PAD_ID`` (0) to that
    length; the bucket's batch size is ``max_tokens_per_batch //
    bucket_length``, so each batch holds at most ``max_tokens_per_batch``
    source tokens and as many target tokens, padding included.

    `TextPairs` are tokenized once, up front, and their too-long pairs are
    counted in a WARNING log when any; a ``tf.data.Dataset`` streams, and
    :func:`count_too_long` counts.

    Args:
        pairs: :class:`~keras_transformer.data.TextPairs`, or a
            ``tf.data.Dataset`` of ``(source, target)`` scalar strings.
        tokenizer: Tokenizer of the sources and, unless ``target_tokenizer``
            is given, of the targets (a shared vocabulary).
        max_tokens_per_batch: Token budget per batch and per side.
        bucket_boundaries: Strictly increasing bucket lengths; the largest
            must be ``>= max_sentence_length``.
        max_sentence_length: Longest sequence kept, in tokens including
            END/START (the setting ``data.max_sentence_length``).
        too_long: ``"drop"`` pairs over ``max_sentence_length``, or
            ``"truncate"`` them (END stays the last source and label token).
        shuffle: Shuffle the pairs (each epoch anew) before bucketing; with
            ``shuffle=False`` the output is deterministic.
        shuffle_buffer: Shuffle buffer size in pairs; ``None`` means all the
            pairs for ``TextPairs`` and 16384 for a dataset.
        seed: Shuffle seed, for reproducible epochs; ``None`` for a random one.
        repeat: Repeat forever (buckets then fill across epoch boundaries).
        drop_remainder: Drop the last, smaller batch of each bucket.
        target_tokenizer: Tokenizer of the targets for separate vocabularies.

    Returns:
        A dataset of ``((source_ids, target_input_ids), target_label_ids)``,
        each ``int32`` of shape ``[batch, bucket_length]``, for ``model.fit``.

    Raises:
        ValueError: On invalid arguments, or if every pair is too long.
    """
    _check_batching_options(too_long, shuffle_buffer)
    sizes = bucket_batch_sizes(
        max_tokens_per_batch, bucket_boundaries, max_sentence_length
    )
    dataset, buffer = _token_pairs(
        pairs, tokenizer, target_tokenizer, max_sentence_length, too_long
    )
    dataset = _with_special_ids(dataset, tokenizer, max_sentence_length, too_long)
    if isinstance(pairs, TextPairs):
        dataset = dataset.cache()
    if shuffle:
        dataset = dataset.shuffle(
            shuffle_buffer or buffer, seed=seed, reshuffle_each_iteration=True
        )
    if repeat:
        dataset = dataset.repeat()
    return _bucketed(dataset, sizes, drop_remainder).prefetch(tf.data.AUTOTUNE)


def _check_batching_options(too_long: str, shuffle_buffer: int | None) -> None:
    if too_long not in ("drop", "truncate"):
        raise ValueError(
            f"too_long={too_long!r} is not supported; use 'drop' or 'truncate'."
        )
    if shuffle_buffer is not None and shuffle_buffer < 1:
        raise ValueError(f"shuffle_buffer must be positive, got {shuffle_buffer}.")


def _token_pairs(
    pairs: PairsLike,
    tokenizer: SubwordTokenizer,
    target_tokenizer: SubwordTokenizer | None,
    max_sentence_length: int,
    too_long: str,
) -> tuple[tf.data.Dataset, int]:
    """The pairs as token ids (no START/END yet), and the shuffle buffer that
    holds them all (`TextPairs`) or `_DEFAULT_STREAM_SHUFFLE_BUFFER`.

    `TextPairs` are tokenized up front and their too-long pairs counted (a
    warning; an error when ``too_long="drop"`` would drop them all).
    """
    if isinstance(pairs, TextPairs):
        if len(pairs) == 0:
            raise ValueError("pairs is empty; there is nothing to batch.")
        source_ids, target_ids = _tokenize_pairs(pairs, tokenizer, target_tokenizer)
        report = _report(
            source_ids.row_lengths(), target_ids.row_lengths(), max_sentence_length
        )
        if report.num_too_long == report.num_pairs and too_long == "drop":
            raise ValueError(
                f"All pairs are too long: {report}. Raise max_sentence_length "
                "(and bucket_boundaries) or pass too_long='truncate'."
            )
        if report.num_too_long:
            action = "dropping" if too_long == "drop" else "truncating"
            logger.warning("%s: %s", action, report)
        dataset = tf.data.Dataset.from_tensor_slices((source_ids, target_ids))
        return dataset, len(pairs)
    if isinstance(pairs, tf.data.Dataset):
        _check_string_pairs(pairs)
        dataset = _tokenize_stream(pairs, tokenizer, target_tokenizer)
        return dataset, _DEFAULT_STREAM_SHUFFLE_BUFFER
    raise TypeError(
        f"pairs must be TextPairs or a tf.data.Dataset, got {type(pairs).__name__}."
    )


def _with_special_ids(
    dataset: tf.data.Dataset,
    tokenizer: SubwordTokenizer,
    max_sentence_length: int,
    too_long: str,
) -> tf.data.Dataset:
    """Drops or cuts the pairs over `max_sentence_length` tokens (END/START
    included), then makes ``((source + END, START + target), target + END)``."""
    keep = max_sentence_length - 1  # room for START / END
    if too_long == "drop":
        dataset = dataset.filter(
            lambda s, t: tf.logical_and(tf.size(s) <= keep, tf.size(t) <= keep)
        )
    else:
        dataset = dataset.map(lambda s, t: (s[:keep], t[:keep]))
    start_id, end_id = tokenizer.START_ID, tokenizer.END_ID

    def add_special_ids(source: tf.Tensor, target: tf.Tensor):
        end = tf.constant([end_id], tf.int32)
        start = tf.constant([start_id], tf.int32)
        source = tf.concat([source, end], axis=0)
        target_input = tf.concat([start, target], axis=0)
        target_label = tf.concat([target, end], axis=0)
        return (source, target_input), target_label

    return dataset.map(add_special_ids, num_parallel_calls=tf.data.AUTOTUNE)


def _bucketed(
    dataset: tf.data.Dataset, sizes: dict[int, int], drop_remainder: bool
) -> tf.data.Dataset:
    """Batches of similar lengths (§5.1): `sizes` maps each bucket length to
    its batch size; a batch is padded to its bucket's length."""
    lengths = list(sizes)
    return dataset.bucket_by_sequence_length(
        element_length_func=lambda inputs, label: tf.maximum(
            tf.shape(inputs[0])[0], tf.shape(label)[0]
        ),
        # tf.data buckets hold lengths [b_i-1, b_i) and pad to b_i - 1, so
        # shift by one: bucket i then holds (L_i-1, L_i] and pads to L_i.
        bucket_boundaries=[length + 1 for length in lengths],
        bucket_batch_sizes=[sizes[length] for length in lengths] + [1],
        pad_to_bucket_boundary=True,
        drop_remainder=drop_remainder,
    )


def encode_sources(
    tokenizer: SubwordTokenizer,
    sentences: tf.Tensor | Sequence[str],
    max_input_length: int,
) -> tf.RaggedTensor:
    """The encoder input of raw sentences: the one source-cut rule.

    Each sentence is tokenized without START, cut to its first
    ``max_input_length - 1`` subword tokens, and END is appended, so at most
    ``max_input_length`` ids reach the encoder (§5.1 trains on sentences of
    bounded length; §6.1 decodes up to the source length + 50). A sentence
    without any subword token (``""``, whitespace) gives ``[END]``.

    Every reader of raw sources uses it: `batch_for_eval`, the translator of
    `keras_transformer.translation` (eagerly) and the exported SavedModel of
    `keras_transformer.export` (in its graph).

    Args:
        tokenizer: the model's tokenizer.
        sentences: a ``tf.string`` tensor ``[batch]`` or a list of strings.
        max_input_length: the longest source in ids, END included (>= 2):
            the decode setting of the same name.

    Returns:
        int32 ids, a ``tf.RaggedTensor`` ``[batch, (length)]``.
    """
    limit = max_input_length
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise TypeError(f"max_input_length must be an integer. Received: {limit!r}")
    if limit < 2:
        raise ValueError(
            "max_input_length must be at least 2 (one token and END). "
            f"Received: {limit}"
        )
    sentences = tf.reshape(tf.convert_to_tensor(sentences, tf.string), [-1])
    tokens = tokenizer.tokenize(sentences)[:, : limit - 1]
    # END written after each row's tokens in a dense copy: a ragged concat
    # along axis 1 transposes int64 row indices, which TensorFlow's oneDNN
    # build answers with an error line on stderr on some CPUs.
    lengths = tokens.row_lengths()
    dense = tf.pad(tokens.to_tensor(), [[0, 0], [0, 1]])
    width = tf.range(tf.shape(dense, out_type=lengths.dtype)[1])
    dense = tf.where(width[None] == lengths[:, None], tokenizer.END_ID, dense)
    return tf.RaggedTensor.from_tensor(dense, lengths=lengths + 1)


def batch_for_eval(
    pairs: PairsLike,
    tokenizer: SubwordTokenizer,
    *,
    batch_size: int = 64,
    max_length: int = 128,
    bucket_boundaries: Sequence[int] = DEFAULT_BUCKET_BOUNDARIES,
) -> tf.data.Dataset:
    """Batches sources for decoding and keeps the reference translations.

    Order is preserved and nothing is dropped, so the outputs line up with
    ``pairs`` for BLEU. Sources over ``max_length`` are cut by
    `encode_sources` (the first ``max_length - 1`` tokens, then END). Each
    batch is padded to the smallest bucket boundary that holds its longest
    source, which keeps the number of distinct shapes small.

    Args:
        pairs: :class:`~keras_transformer.data.TextPairs`, or a
            ``tf.data.Dataset`` of ``(source, target)`` scalar strings.
        tokenizer: Tokenizer of the sources.
        batch_size: Pairs per batch (the last batch may be smaller).
        max_length: Longest source, in tokens including END.
        bucket_boundaries: Lengths to pad to; the largest must be
            ``>= max_length``.

    Returns:
        A dataset of ``(source_ids, references)``: ``int32`` ids of shape
        ``[batch, bucket_length]`` (``x + [END]``, padded with 0) and the
        target sentences as a ``[batch]`` ``tf.string`` tensor.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be positive, got {batch_size}.")
    boundaries = tf.constant(_used_boundaries(bucket_boundaries, max_length), tf.int32)
    if isinstance(pairs, TextPairs):
        dataset = pairs.to_dataset()
    elif isinstance(pairs, tf.data.Dataset):
        _check_string_pairs(pairs)
        dataset = pairs
    else:
        raise TypeError(
            f"pairs must be TextPairs or a tf.data.Dataset, got {type(pairs).__name__}."
        )

    def encode(sources: tf.Tensor, references: tf.Tensor):
        ids = encode_sources(tokenizer, sources, max_length)
        dense = ids.to_tensor(default_value=tokenizer.PAD_ID)
        length = tf.shape(dense)[1]
        bucket = tf.gather(boundaries, tf.searchsorted(boundaries, [length])[0])
        dense = tf.pad(dense, [[0, 0], [0, bucket - length]])
        return dense, references

    return (
        dataset.batch(batch_size)
        .map(encode, num_parallel_calls=tf.data.AUTOTUNE)
        .prefetch(tf.data.AUTOTUNE)
    )

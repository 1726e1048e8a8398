"""Greedy translation and scoring for training: `keras_transformer.translation`.

Validation during training and the final test evaluation translate greedily
(§6.1 with beam size 1) through the one `Translator` of
`keras_transformer.translation` and score with its `score_translations`.
The functions here keep the argument names of the training configuration
(``max_length`` is `DataConfig.max_length`, ``output_max_length`` the
model's); new code can use `Translator` directly.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import keras
import numpy as np

from keras_transformer.data.batching import DEFAULT_BUCKET_BOUNDARIES
from keras_transformer.data.text import TextPairs
from keras_transformer.data.tokenizer import SubwordTokenizer
from keras_transformer.decoding.settings import default_setting
from keras_transformer.translation import (
    EvaluationResult,
    Translation,
    Translator,
)

__all__ = [
    "EvaluationResult",
    "Translation",
    "evaluate_translations",
    "greedy_output_ids",
    "greedy_translator",
    "translate",
]


def greedy_translator(
    model: keras.Model,
    tokenizer: SubwordTokenizer,
    *,
    max_length: int = 128,
    extra_length: int = default_setting("extra_length"),
    output_max_length: int | None = None,
    batch_size: int = 64,
    bucket_boundaries: Sequence[int] = DEFAULT_BUCKET_BOUNDARIES,
) -> Translator:
    """The greedy `Translator` of validation (§6.1 with beam size 1).

    Args:
        model: a model from `build_transformer`.
        tokenizer: the shared tokenizer it was trained with.
        max_length: sources are cut to this many tokens (END included), the
            run's training length, without a warning.
        extra_length: an output may have the source length plus this many
            tokens (§6.1: "input length + 50").
        output_max_length: a cap on the output length (END included), e.g.
            the model's `max_length`.
        batch_size: sentences decoded together.
        bucket_boundaries: source lengths are padded up to one of these.
    """
    return Translator(
        model,
        tokenizer,
        beam_size=1,
        max_input_length=max_length,
        extra_length=extra_length,
        max_output_length=output_max_length,
        batch_size=batch_size,
        bucket_boundaries=tuple(bucket_boundaries),
        warn_on_cut=False,
    )


def translate(
    model: keras.Model,
    tokenizer: SubwordTokenizer,
    sentences: Sequence[str],
    **settings: Any,
) -> list[str]:
    """Greedy translations of `sentences` (§6.1 with beam size 1), in order.

    ``greedy_translator(model, tokenizer, **settings).translate(sentences)``.
    """
    return greedy_translator(model, tokenizer, **settings).translate(list(sentences))


def evaluate_translations(
    model: keras.Model,
    tokenizer: SubwordTokenizer,
    pairs: TextPairs,
    *,
    split: str = "test",
    **settings: Any,
) -> EvaluationResult:
    """Translates `pairs` greedily and scores them with sacreBLEU and chrF.

    The scores are computed on detokenized text against the raw references
    with sacrebleu's defaults (13a tokenization, mixed case), so they are
    comparable with published sacreBLEU numbers; the signatures say exactly
    how (Post, 2018). Note that §6.1 reports tokenized BLEU with beam search.
    The settings are those of `greedy_translator`.
    """
    translator = greedy_translator(model, tokenizer, **settings)
    return translator.evaluate(list(pairs.sources), list(pairs.targets), split=split)


def greedy_output_ids(
    model: keras.Model,
    source_ids: Sequence[int],
    *,
    extra_length: int = default_setting("extra_length"),
    output_max_length: int | None = None,
) -> list[int]:
    """The greedy output of one source (ids, END included, no padding)."""
    from keras_transformer.decoding import DecodeSettings, get_decoder

    result = get_decoder(model).decode(
        np.asarray([list(source_ids)], "int32"),
        DecodeSettings(method="greedy", extra_length=extra_length),
        max_length=output_max_length,
    )
    return [int(i) for i in np.asarray(result.token_ids)[0] if int(i) != 0]

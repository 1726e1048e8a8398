"""Translating sentences and scoring them with sacreBLEU and chrF (§6.1).

This module is the one place where training depends on `kt.decoding`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import keras
import numpy as np
from sacrebleu.metrics import BLEU, CHRF

from keras_transformer.data import (
    DEFAULT_BUCKET_BOUNDARIES,
    SubwordTokenizer,
    TextPairs,
)
from keras_transformer.data.batching import batch_for_eval

__all__ = [
    "EvaluationResult",
    "Translation",
    "evaluate_translations",
    "greedy_output_ids",
    "translate",
]


@dataclasses.dataclass(frozen=True)
class Translation:
    """One translated sentence with its reference."""

    source: str
    reference: str
    hypothesis: str


@dataclasses.dataclass(frozen=True)
class EvaluationResult:
    """Corpus scores of greedy translations.

    Attributes:
        split: which pairs were translated, e.g. ``"test_2016_flickr"``.
        bleu: corpus sacreBLEU (0-100) of the detokenized outputs.
        chrf: corpus chrF (0-100).
        exact_match: share of outputs equal to their reference.
        bleu_signature, chrf_signature: sacrebleu's signatures, to report
            alongside the scores.
        num_sentences: how many pairs were translated.
        translations: every translation, in the order of the pairs.
    """

    split: str
    bleu: float
    chrf: float
    exact_match: float
    bleu_signature: str
    chrf_signature: str
    num_sentences: int
    translations: tuple[Translation, ...] = dataclasses.field(repr=False)

    def summary(self) -> str:
        return (
            f"{self.split}: BLEU {self.bleu:.2f} ({self.bleu_signature}), chrF "
            f"{self.chrf:.2f} ({self.chrf_signature}), exact match "
            f"{100 * self.exact_match:.1f}% on {self.num_sentences} sentences"
        )

    def to_dict(self, num_translations: int = 0) -> dict:
        values = dataclasses.asdict(self)
        values["translations"] = [
            dataclasses.asdict(t) for t in self.translations[:num_translations]
        ]
        return values


def translate(
    model: keras.Model,
    tokenizer: SubwordTokenizer,
    sentences: Sequence[str],
    *,
    max_length: int = 128,
    extra_length: int = 50,
    output_max_length: int | None = None,
    batch_size: int = 64,
    bucket_boundaries: Sequence[int] = DEFAULT_BUCKET_BOUNDARIES,
) -> list[str]:
    """Greedy translations of `sentences` (§6.1 with beam size 1).

    Args:
        model: a model from `build_transformer`.
        tokenizer: the shared tokenizer it was trained with.
        sentences: source sentences.
        max_length: sources are truncated to this many tokens (END
            included).
        extra_length: an output may have the source length plus this many
            tokens (§6.1: "input length + 50").
        output_max_length: a cap on the output length (END included), e.g.
            the model's `max_length`.
        batch_size: sentences decoded together.
        bucket_boundaries: source lengths are padded up to one of these.

    Returns:
        The detokenized outputs, in order.
    """
    from keras_transformer.decoding import greedy_decode

    if not sentences:
        return []
    pairs = TextPairs(tuple(sentences), tuple(sentences))
    boundaries = [b for b in bucket_boundaries if b < max_length] + [max_length]
    batches = batch_for_eval(
        pairs,
        tokenizer,
        batch_size=batch_size,
        max_length=max_length,
        bucket_boundaries=boundaries,
    )
    outputs: list[str] = []
    for source_ids, _ in batches.as_numpy_iterator():
        result = greedy_decode(
            model,
            np.asarray(source_ids, "int32"),
            max_length=output_max_length,
            start_id=tokenizer.START_ID,
            end_id=tokenizer.END_ID,
            extra_length=extra_length,
        )
        outputs.extend(tokenizer.decode(np.asarray(result.token_ids).tolist()))
    return outputs


def evaluate_translations(
    model: keras.Model,
    tokenizer: SubwordTokenizer,
    pairs: TextPairs,
    *,
    split: str = "test",
    max_length: int = 128,
    extra_length: int = 50,
    output_max_length: int | None = None,
    batch_size: int = 64,
    bucket_boundaries: Sequence[int] = DEFAULT_BUCKET_BOUNDARIES,
) -> EvaluationResult:
    """Translates `pairs` greedily and scores them with sacreBLEU and chrF.

    The scores are computed on detokenized text against the raw references
    with sacrebleu's defaults (13a tokenization, mixed case), so they are
    comparable with published sacreBLEU numbers; the signatures say exactly
    how (Post, 2018). Note that §6.1 reports tokenized BLEU with beam search.
    """
    hypotheses = translate(
        model,
        tokenizer,
        pairs.sources,
        max_length=max_length,
        extra_length=extra_length,
        output_max_length=output_max_length,
        batch_size=batch_size,
        bucket_boundaries=bucket_boundaries,
    )
    references = list(pairs.targets)
    bleu, chrf = BLEU(), CHRF()
    bleu_score = bleu.corpus_score(hypotheses, [references])
    chrf_score = chrf.corpus_score(hypotheses, [references])
    matches = sum(
        h.strip() == r.strip() for h, r in zip(hypotheses, references, strict=True)
    )
    return EvaluationResult(
        split=split,
        bleu=float(bleu_score.score),
        chrf=float(chrf_score.score),
        exact_match=matches / max(1, len(references)),
        bleu_signature=str(bleu.get_signature()),
        chrf_signature=str(chrf.get_signature()),
        num_sentences=len(references),
        translations=tuple(
            Translation(s, r, h)
            for s, r, h in zip(pairs.sources, references, hypotheses, strict=True)
        ),
    )


def greedy_output_ids(
    model: keras.Model,
    source_ids: Sequence[int],
    *,
    extra_length: int = 50,
    output_max_length: int | None = None,
) -> list[int]:
    """The greedy output of one source (ids, END included, no padding)."""
    from keras_transformer.decoding import greedy_decode

    result = greedy_decode(
        model,
        np.asarray([list(source_ids)], "int32"),
        max_length=output_max_length,
        extra_length=extra_length,
    )
    return [int(i) for i in np.asarray(result.token_ids)[0] if int(i) != 0]

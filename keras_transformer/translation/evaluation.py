"""`evaluate` (also ``kt.evaluate``): translate a test set, write the
hypotheses, score them and log the scores (§6.1; Post, 2018)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import keras

from keras_transformer.data.tokenizer import SubwordTokenizer
from keras_transformer.translation.lines import (
    SOURCES_MISMATCH,
    check_line_pairs,
    refuse_empty_pairs,
)
from keras_transformer.translation.scores import EvaluationResult
from keras_transformer.translation.translator import Translator


def evaluate(
    model_or_workdir: keras.Model | str | os.PathLike[str],
    source_sentences: Sequence[str],
    references: Sequence[str],
    *,
    tokenizer: SubwordTokenizer | None = None,
    weights: str = "last",
    hypotheses_path: str | os.PathLike[str] | None = None,
    log_dir: str | os.PathLike[str] | None = None,
    step: int = 0,
    split: str = "test",
    progress: bool = False,
    **settings: Any,
) -> EvaluationResult:
    """Translates a test set and scores it with sacreBLEU and chrF (§6.1).

    Beam search with beam 4 and alpha 0.6, outputs up to the source length +
    50 tokens, as in the paper (§6.1); ``beam_size=1`` decodes greedily.

    Args:
        model_or_workdir: a Keras model (then pass `tokenizer`), a training
            work directory, or an export folder (see `load_translator`).
        source_sentences: the test sources.
        references: one reference translation per source.
        tokenizer: the model's tokenizer (only with a model).
        weights: which weights of a training run (``"last"``, ``"best"``,
            ``"average"``, or a path).
        hypotheses_path, log_dir, step, split, progress: as for
            `Translator.evaluate`.
        **settings: the decoding settings of `Translator` (``beam_size``,
            ``alpha``, ``max_input_length``, ``extra_length``,
            ``batch_size``, ...); an export folder starts from those it was
            exported with (`Translator.load`).

    Returns:
        An `EvaluationResult`: ``bleu``, ``chrf`` (0-100), their sacrebleu
        signatures, ``exact_match``, and every translation.

    Raises:
        ValueError: (one line) for a pair whose source or reference is empty
            or blank (`refuse_empty_pairs`), before anything is translated.

    Reference: Vaswani et al. (2017), §6.1; Post (2018), "A Call for Clarity
    in Reporting BLEU Scores".
    """
    sources, references = check_line_pairs(
        "source_sentences", source_sentences, references, SOURCES_MISMATCH
    )
    refuse_empty_pairs(sources, references)
    if isinstance(model_or_workdir, keras.Model):
        if tokenizer is None:
            raise ValueError(
                "evaluate(model, ...) needs the model's tokenizer: pass "
                "tokenizer=..., or pass the run's work directory instead of the "
                "model."
            )
        translator = Translator(model_or_workdir, tokenizer, **settings)
    else:
        if tokenizer is not None:
            raise ValueError(
                "Pass `tokenizer` only with a model: a work directory or export "
                "folder brings its own tokenizer."
            )
        translator = Translator.load(model_or_workdir, weights, **settings)
    return translator.evaluate(
        sources,
        references,
        split=split,
        hypotheses_path=hypotheses_path,
        log_dir=log_dir,
        step=step,
        progress=progress,
    )


__all__ = ["evaluate"]

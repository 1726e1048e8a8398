"""Text in, text out, scores: the one way to translate and to score (§6.1).

"We used beam search with a beam size of 4 and length penalty alpha = 0.6
... We set the maximum output length during inference to input length + 50,
but terminate early when possible" (Vaswani et al. 2017, §6.1). These are
the defaults here; ``beam_size=1`` decodes greedily (what validation during
training reports).

Every caller (validation during training, ``kt.evaluate``, the
``evaluate``, ``translate`` and ``score`` commands, the notebooks) takes the
same road: `Translator` and `translate_lines` (`translator`), the corpus
scores `score_translations` / `EvaluationResult` / `log_scores` (`scores`;
sacreBLEU and chrF with their signatures, Post 2018), `evaluate`
(`evaluation`), `load_translator` (`loading`: a training run or an export
folder) and the line files `read_lines` / `write_lines` (`lines`).
Argument parsing lives in `keras_transformer.cli`.
"""

from __future__ import annotations

from keras_transformer.conventions import DEFAULT_MAX_INPUT_LENGTH
from keras_transformer.source_limits import SourceCutWarning
from keras_transformer.translation.evaluation import evaluate
from keras_transformer.translation.lines import read_lines, write_lines
from keras_transformer.translation.loading import load_translator
from keras_transformer.translation.scores import (
    EvaluationResult,
    TargetScore,
    Translation,
    log_scores,
    score_translations,
)
from keras_transformer.translation.translator import Translator, translate_lines

__all__ = [
    "DEFAULT_MAX_INPUT_LENGTH",
    "EvaluationResult",
    "SourceCutWarning",
    "TargetScore",
    "Translation",
    "Translator",
    "evaluate",
    "load_translator",
    "log_scores",
    "read_lines",
    "score_translations",
    "translate_lines",
    "write_lines",
]

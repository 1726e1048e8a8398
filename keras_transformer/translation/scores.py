"""Corpus scores of translations: sacreBLEU and chrF (Post, 2018).

* `score_translations`: corpus sacreBLEU and chrF with their signatures, on
  detokenized text against raw references (13a tokenization, mixed case),
  not the tokenized BLEU of the paper's tables (Vaswani et al. 2017, §6.1).
* `EvaluationResult`: the scores and every translation (one dataclass for
  training, ``evaluate`` and the command line); `log_scores` writes them
  for TensorBoard.
* `TargetScore`: the log-probability of a given target (`Translator.score`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from keras_transformer.decoding.settings import DecodeSettings
from keras_transformer.files import as_os_error, write_error
from keras_transformer.translation.lines import check_line_pairs


@dataclasses.dataclass(frozen=True)
class Translation:
    """One translated sentence with its reference."""

    source: str
    reference: str
    hypothesis: str


@dataclasses.dataclass(frozen=True)
class EvaluationResult:
    """Corpus scores of translated sentences, and the translations (§6.1).

    Attributes:
        split: which sentences were translated, e.g. ``"test_2016_flickr"``.
        bleu: corpus sacreBLEU (0-100) of the detokenized outputs.
        chrf: corpus chrF (0-100).
        exact_match: share of outputs equal to their reference.
        bleu_signature, chrf_signature: sacrebleu's signatures, to report
            alongside the scores.
        num_sentences: how many sentences were translated.
        translations: every translation, in the order of the sources.
        settings: the decoding settings used; ``to_dict`` writes their
            ``method``, ``beam_size`` and ``alpha`` (``beam_size`` 1 for a
            one-hypothesis search).
        hypotheses_path: where the hypotheses were written, if anywhere.
        log_dir: the TensorBoard folder the scores were logged to, if any.
    """

    split: str
    bleu: float
    chrf: float
    exact_match: float
    bleu_signature: str
    chrf_signature: str
    num_sentences: int
    translations: tuple[Translation, ...] = dataclasses.field(repr=False)
    settings: DecodeSettings = DecodeSettings(method="greedy")
    hypotheses_path: str | None = None
    log_dir: str | None = None

    @classmethod
    def scored(
        cls,
        sources: Sequence[str],
        references: Sequence[str],
        hypotheses: Sequence[str],
        settings: DecodeSettings,
        *,
        split: str = "test",
        hypotheses_path: str | os.PathLike[str] | None = None,
        log_dir: str | os.PathLike[str] | None = None,
    ) -> EvaluationResult:
        """The result of `hypotheses` (the translations of `sources` with
        `settings`) scored against `references` (`score_translations`:
        corpus sacreBLEU and chrF, Post 2018; the paper's BLEU, §6.1)."""
        return cls(
            split=split,
            num_sentences=len(references),
            translations=tuple(
                Translation(s, r, h)
                for s, r, h in zip(sources, references, hypotheses, strict=True)
            ),
            settings=settings,
            hypotheses_path=None if hypotheses_path is None else str(hypotheses_path),
            log_dir=None if log_dir is None else str(log_dir),
            **score_translations(hypotheses, references),
        )

    @property
    def hypotheses(self) -> list[str]:
        """The translations, in the order of the sources."""
        return [t.hypothesis for t in self.translations]

    @property
    def beam_size(self) -> int:
        """Hypotheses per sentence (1: greedy decoding or sampling)."""
        return self.settings.beam_size if self.settings.strategy == "beam" else 1

    @property
    def alpha(self) -> float:
        """The length-penalty alpha of the settings."""
        return self.settings.alpha

    @property
    def decoding(self) -> str:
        """``"greedy"`` or ``"beam 4, alpha 0.6"``."""
        return self.settings.describe()

    def summary(self) -> str:
        """One line: the scores, their signatures and the decoding."""
        return (
            f"{self.split}: BLEU {self.bleu:.2f} ({self.bleu_signature}), chrF "
            f"{self.chrf:.2f} ({self.chrf_signature}), exact match "
            f"{100 * self.exact_match:.1f}% on {self.num_sentences} sentences; "
            f"{self.decoding}"
        )

    def to_dict(self, num_translations: int = 0) -> dict[str, Any]:
        """JSON-compatible values, with the first `num_translations` translations."""
        values = dataclasses.asdict(self)
        del values["settings"]
        values["method"] = self.settings.strategy
        values["beam_size"], values["alpha"] = self.beam_size, self.alpha
        values["early_stop"] = self.settings.early_stop
        values["translations"] = [
            dataclasses.asdict(t) for t in self.translations[:num_translations]
        ]
        return values


@dataclasses.dataclass(frozen=True)
class TargetScore:
    """The log-probability of a given target (`Translator.score`).

    Attributes:
        log_prob: ``log P(Y | X)``, the sum of `token_log_probs`.
        token_log_probs: ``log P(y_t | y_<t, X)`` per subword token, END last.
    """

    log_prob: float
    token_log_probs: tuple[float, ...]


def score_translations(
    hypotheses: Sequence[str], references: Sequence[str]
) -> dict[str, Any]:
    """Corpus sacreBLEU and chrF of detokenized hypotheses against references.

    sacrebleu's defaults (BLEU: 13a tokenization, mixed case, exp smoothing;
    chrF: character 6-grams, beta 2), reported with their signatures so that
    the numbers can be compared (Post, 2018). Note that §6.1 of the paper
    reports tokenized BLEU.

    Returns:
        ``{"bleu", "chrf", "bleu_signature", "chrf_signature",
        "exact_match"}``.

    Raises:
        ValueError: (one line) when the counts differ or there is no
            sentence (sacrebleu's own error was an `IndexError`).
    """
    from sacrebleu.metrics import BLEU, CHRF

    hypotheses, references = check_line_pairs(
        "hypotheses",
        hypotheses,
        references,
        "There are {lines} hypotheses but {references} references; every "
        "sentence needs one of each.",
    )
    if not references:
        raise ValueError(
            "There are no sentences to score: pass at least one hypothesis and "
            "its reference."
        )
    bleu, chrf = BLEU(), CHRF()
    matches = sum(
        h.strip() == r.strip() for h, r in zip(hypotheses, references, strict=True)
    )
    return {
        "bleu": float(bleu.corpus_score(hypotheses, [references]).score),
        "chrf": float(chrf.corpus_score(hypotheses, [references]).score),
        "bleu_signature": str(bleu.get_signature()),
        "chrf_signature": str(chrf.get_signature()),
        "exact_match": matches / max(1, len(references)),
    }


def log_scores(
    result: EvaluationResult, log_dir: str | os.PathLike[str], step: int = 0
) -> None:
    """The scores of `result` in `log_dir` for TensorBoard: scalars, signatures.

    Raises:
        FileWriteError: one line naming `log_dir` when it cannot be written
            (read-only, no permission, full disk); the events file begun
            there is removed, and so is a folder made for it.
    """
    import tensorflow as tf

    log_dir = Path(log_dir)
    made = not log_dir.exists()
    before = set() if made else set(_events_files(log_dir))
    try:
        writer = tf.summary.create_file_writer(str(log_dir))
        _write_scores(writer, result, step)
    except (OSError, tf.errors.OpError) as e:
        _remove_begun_events_files(log_dir, before, made)
        raise write_error(
            log_dir, as_os_error(e), kept="no scores were logged there"
        ) from e


def _events_files(log_dir: Path) -> list[Path]:
    """The TensorBoard events files in `log_dir` (none if it is unreadable)."""
    try:
        return list(log_dir.glob("events.out.tfevents.*"))
    except OSError:
        return []


def _remove_begun_events_files(log_dir: Path, before: set[Path], made: bool) -> None:
    """After a failed write (a full disk): the events files of `log_dir` that
    this process began since `before` (their names hold its PID), which
    hold no scores, and the folder if this call made it and it is now
    empty. Earlier files, this process's own included, stay."""
    own = f".{os.getpid()}."
    with contextlib.suppress(OSError):
        for path in set(_events_files(log_dir)) - before:
            if own in path.name:
                path.unlink(missing_ok=True)
        if made and not any(log_dir.iterdir()):
            log_dir.rmdir()


def _write_scores(writer: Any, result: EvaluationResult, step: int) -> None:
    """The scores as TensorBoard scalars, the signatures as text."""
    import tensorflow as tf

    with writer.as_default(step=step):
        tf.summary.scalar("bleu", result.bleu)
        tf.summary.scalar("chrf", result.chrf)
        tf.summary.scalar("exact_match", result.exact_match)
        tf.summary.text("bleu_signature", result.bleu_signature)
        tf.summary.text("chrf_signature", result.chrf_signature)
        tf.summary.text(
            "decoding",
            f"{result.decoding} on {result.num_sentences} sentences of {result.split}",
        )
    writer.close()


__all__ = [
    "EvaluationResult",
    "TargetScore",
    "Translation",
    "log_scores",
    "score_translations",
]

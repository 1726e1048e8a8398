"""Text in, text out, scores: the one way to translate and to score (§6.1).

"We used beam search with a beam size of 4 and length penalty alpha = 0.6
... We set the maximum output length during inference to input length + 50,
but terminate early when possible" (Vaswani et al. 2017, §6.1). These are
the defaults here; ``beam_size=1`` decodes greedily (what validation during
training reports).

Every caller takes the same road, whoever it is (validation during training,
``kt.evaluate``, ``keras-transformer evaluate`` and ``translate``, the
notebooks):

* `Translator` (model + tokenizer + decoding settings): text lines ->
  subword ids once (`keras_transformer.data.batching.encode_sources`, the
  source-cut rule shared with the exported SavedModel) -> batches sorted by
  length -> greedy or beam search (`keras_transformer.decoding`) -> text.
  `translate_lines` is the same as a function.
* `score_translations`: corpus sacreBLEU and chrF with their signatures
  (Post, 2018), on detokenized text against raw references (13a
  tokenization, mixed case), not the tokenized BLEU of the paper's tables.
* `EvaluationResult`: the scores and every translation (one dataclass for
  training, ``evaluate`` and the command line).
* `evaluate` (also ``kt.evaluate``): translate a test set, write the
  hypotheses, score them, log them to TensorBoard.
* `load_translator`: a model and tokenizer from a training run
  (`keras_transformer.runs.RunFolder`) or an export folder.
* `read_lines` / `write_lines`: line-aligned UTF-8 files.

It is one module rather than a package because these pieces are small and
always used together; argument parsing lives in `keras_transformer.cli`.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import keras
import numpy as np

from keras_transformer import validation
from keras_transformer.conventions import DEFAULT_MAX_INPUT_LENGTH
from keras_transformer.data.batching import DEFAULT_BUCKET_BOUNDARIES, encode_sources
from keras_transformer.data.tokenizer import SubwordTokenizer
from keras_transformer.decoding import DecodeResult, DecodeSettings, get_decoder
from keras_transformer.decoding.settings import settings_with
from keras_transformer.files import (
    as_os_error,
    write_atomically,
    write_error,
)
from keras_transformer.progress import LineProgress
from keras_transformer.runs import RunFolder, is_export_dir, load_export

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


# ----------------------------------------------------------------- results
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


# ------------------------------------------------------------- translating
class SourceCutWarning(UserWarning):
    """Some sources were longer than `Translator.max_input_length` and were cut.

    `Translator.cut_lines` says which (their indices in the last call).
    """


def describe_lines(numbers: Sequence[int], limit: int = 10) -> str:
    """``"3, 17, 20"``, or the first `limit` numbers and ``", ..."``."""
    shown = ", ".join(str(n) for n in numbers[:limit])
    return shown + (", ..." if len(numbers) > limit else "")


def _check_lines(name: str, lines: Any) -> list[str]:
    if isinstance(lines, (str, bytes)):
        raise TypeError(
            f"`{name}` must be a list of strings; wrap one string in a list."
        )
    lines = list(lines)
    for i, line in enumerate(lines):
        if not isinstance(line, str):
            raise TypeError(
                f"`{name}[{i}]` is a {type(line).__name__}, not a str. Decode "
                "bytes to str first."
            )
    return lines


#: The error of `evaluate` (and `Translator.evaluate`) when the counts differ.
_SOURCES_MISMATCH = (
    "evaluate got {lines} source sentences but {references} references; pass one "
    "reference per source, in the same order."
)


def _check_line_pairs(
    name: str, lines: Any, references: Any, mismatch: str
) -> tuple[list[str], list[str]]:
    """`lines` and `references` as lists of strings (`_check_lines`), one
    reference per line; else the `ValueError` `mismatch`, formatted with the
    two counts (``{lines}``, ``{references}``)."""
    lines = _check_lines(name, lines)
    references = _check_lines("references", references)
    if len(lines) != len(references):
        raise ValueError(mismatch.format(lines=len(lines), references=len(references)))
    return lines, references


def _setting(name: str) -> property:
    """A `DecodeSettings` field of `Translator.settings` as an attribute;
    assigning it replaces the settings (validated again)."""

    def get(self: Translator) -> Any:
        return getattr(self.settings, name)

    def set_(self: Translator, value: Any) -> None:
        self.settings = self.settings.replace(**{name: value})

    return property(get, set_, doc=f"`settings.{name}` (`DecodeSettings`).")


@dataclasses.dataclass(init=False)
class Translator:
    """A model, its tokenizer and the decoding settings of §6.1.

    Args:
        model: a model from `build_transformer` (or `load_translator`).
        tokenizer: the tokenizer it was trained with.
        settings: the `DecodeSettings` (§6.1 by default: beam 4, alpha 0.6,
            outputs up to the source length + 50, sources up to 128 ids);
            ``beam_size=1`` decodes greedily.
        max_output_length: a cap on every output (END included), e.g. the
            model's ``max_length``; None: no cap beyond `extra_length`.
        batch_size: sentences decoded together.
        bucket_boundaries: a batch is padded to the smallest of these (or
            `max_input_length`) that holds its longest source, so that few
            shapes are traced.
        jit_compile: compile the decoding loop with XLA.
        warn_on_cut: warn (`SourceCutWarning`) once per call that cut
            sources; `cut_lines` is set either way.
        seed: makes sampling (``method="sample"``) reproducible: each batch
            draws with ``seed + its first line's index``; None draws a seed.
        ensemble: more models with `model`'s vocabulary, decoded with it in
            one search that averages their log-probabilities per step
            (`EnsembleDecoder`; `from_runs` loads them).
        **decode_settings: fields of `DecodeSettings` that replace those of
            `settings` (``beam_size=1``, ``alpha=...``, ``max_input_length``,
            ``extra_length``, ...).

    Attributes:
        cut_lines: the indices (from 0) of the sources of the last `encode`
            (`translate`, `evaluate`) call that were longer than
            `max_input_length` and were cut to it.
        unmet_constraints: after `translate(..., constraints=...)`, per line
            the phrases its translation does not contain (empty unless a
            phrase cannot be met, e.g. longer than the output may be, or
            holding text the vocabulary lacks).
        unknown_constraint_pieces: after `translate(..., constraints=...)`,
            per line ``{phrase: its unknown pieces}`` for each phrase holding
            text that no piece of the vocabulary holds (it would encode to
            the unknown piece ``⁇``): such a phrase cannot be met, is left
            out of the search, and is in `unmet_constraints`.

    Example:
    >>> translator = Translator(model, tokenizer, beam_size=1)  # doctest: +SKIP
    >>> translator.translate(["Ein Hund rennt.", ""])  # doctest: +SKIP
    ['A dog runs.', '']

    Reference: Vaswani et al. (2017), §6.1.
    """

    model: keras.Model
    tokenizer: SubwordTokenizer
    settings: DecodeSettings
    max_output_length: int | None
    batch_size: int
    bucket_boundaries: Sequence[int]
    jit_compile: bool
    warn_on_cut: bool
    seed: int | None
    cut_lines: tuple[int, ...] = dataclasses.field(repr=False, compare=False)
    ensemble: tuple[keras.Model, ...] = dataclasses.field(repr=False, compare=False)
    unmet_constraints: list[list[str]] = dataclasses.field(repr=False, compare=False)
    unknown_constraint_pieces: list[dict[str, list[str]]] = dataclasses.field(
        repr=False, compare=False
    )

    def __init__(
        self,
        model: keras.Model,
        tokenizer: SubwordTokenizer,
        settings: DecodeSettings | None = None,
        *,
        max_output_length: int | None = None,
        batch_size: int = 32,
        bucket_boundaries: Sequence[int] = DEFAULT_BUCKET_BOUNDARIES,
        jit_compile: bool = False,
        warn_on_cut: bool = True,
        seed: int | None = None,
        ensemble: Sequence[keras.Model] = (),
        **decode_settings: Any,
    ) -> None:
        validation.check_int("batch_size", batch_size, 1)
        validation.check_int("max_output_length", max_output_length, 1, allow_none=True)
        self.model, self.tokenizer = model, tokenizer
        self.settings = settings_with(settings, decode_settings)
        self.max_output_length = max_output_length
        self.batch_size = batch_size
        self.bucket_boundaries = bucket_boundaries
        self.jit_compile = jit_compile
        self.warn_on_cut = warn_on_cut
        validation.check_int("seed", seed, 0, allow_none=True)
        self.seed = seed
        self.cut_lines = ()
        self.ensemble = tuple(ensemble)
        self.unmet_constraints = []
        self.unknown_constraint_pieces = []
        self._searched_phrases: list[list[int]] = []
        self._ensemble_decoder: Any = None

    # -- the settings, by their names (setting one replaces `settings`) ------
    beam_size = _setting("beam_size")
    alpha = _setting("alpha")
    max_input_length = _setting("max_input_length")
    extra_length = _setting("extra_length")

    @classmethod
    def load(
        cls, path: str | os.PathLike[str], weights: str = "last", **settings: Any
    ) -> Translator:
        """A translator for a training run or an export folder (`load_translator`)."""
        model, tokenizer = load_translator(path, weights)
        return cls(model, tokenizer, **settings)

    @classmethod
    def from_runs(
        cls,
        paths: Sequence[str | os.PathLike[str]],
        weights: str = "last",
        **settings: Any,
    ) -> Translator:
        """A translator decoding an ensemble of runs (or export folders)
        trained with one tokenizer; `weights` applies to each run.

        Raises:
            ValueError: (one line) without paths, or naming two runs whose
                SentencePiece models differ.
        """
        if not paths:
            raise ValueError("from_runs needs at least one run folder; got none.")
        loaded = [load_translator(path, weights) for path in paths]
        first = loaded[0][1]
        for path, (_, tokenizer) in zip(paths[1:], loaded[1:], strict=True):
            if tokenizer.fingerprint != first.fingerprint:
                raise ValueError(
                    f"{paths[0]} and {path} have different SentencePiece models "
                    f"(vocabularies of {first.vocabulary_size} and "
                    f"{tokenizer.vocabulary_size} pieces); ensemble only runs "
                    "trained with one tokenizer."
                )
        models = [model for model, _ in loaded]
        return cls(models[0], first, ensemble=models[1:], **settings)

    # -- ids -----------------------------------------------------------------
    def encode(self, lines: Sequence[str]) -> list[list[int]]:
        """The encoder input of each line: its first ``max_input_length - 1``
        subword ids, then END (`encode_sources`).

        The lines that were longer and cut are recorded in `cut_lines`, and
        a `SourceCutWarning` names them.
        """
        lines = _check_lines("lines", lines)
        self.cut_lines = ()
        if not lines:
            return []
        # One id more than the cap: a row that reaches it was longer than
        # the cap, and keeps the first `limit - 1` tokens and END, as
        # `encode_sources(..., limit)` gives (each line is tokenized once).
        limit = self.max_input_length
        rows = encode_sources(self.tokenizer, lines, limit + 1).to_list()
        cut = [i for i, row in enumerate(rows) if len(row) > limit]
        if cut:
            for i in cut:
                rows[i] = rows[i][: limit - 1] + rows[i][-1:]
            self.cut_lines = tuple(cut)
        if cut and self.warn_on_cut:
            warnings.warn(
                f"{len(cut)} of {len(lines)} sources were longer than "
                f"max_input_length={limit} subword ids (END included) and were "
                f"cut to their first {limit - 1} tokens (indices "
                f"{describe_lines(cut)}; all in Translator.cut_lines); pass a "
                "larger max_input_length to keep more of them.",
                SourceCutWarning,
                stacklevel=2,
            )
        return [list(row) for row in rows]

    def decode_ids(
        self,
        source_ids: Any,
        prefixes: Any = None,
        seed: int | None = None,
        constraints: Sequence[Any] | None = None,
    ) -> DecodeResult:
        """The search of `settings` on a batch of source ids ``[batch, length]``
        (each output starting with its `prefixes` ids, when given);
        `constraints`: per source, phrases of target ids its output must hold
        (`Decoder.decode`)."""
        return self._decoder().decode(
            np.asarray(source_ids, "int32"),
            self.settings,
            max_length=self.max_output_length,
            seed=seed,
            start_id=self.tokenizer.START_ID,
            end_id=self.tokenizer.END_ID,
            prefixes=prefixes,
            constraints=constraints,
        )

    def _decoder(self) -> Any:
        """The model's `Decoder`, or the `EnsembleDecoder` of `model` and
        `ensemble`."""
        if not self.ensemble:
            return get_decoder(self.model, self.jit_compile)
        if self._ensemble_decoder is None:
            from keras_transformer.decoding.ensemble import EnsembleDecoder

            self._ensemble_decoder = EnsembleDecoder(
                [self.model, *self.ensemble], self.jit_compile
            )
        return self._ensemble_decoder

    def _padded_length(self, length: int) -> int:
        for boundary in sorted(self.bucket_boundaries):
            if length <= boundary < self.max_input_length:
                return boundary
        return self.max_input_length

    def _batches(
        self, sources: list[list[int]], progress: bool, skip_empty: bool = True
    ) -> Iterator[tuple[list[int], np.ndarray]]:
        """`(line indices, padded source ids)` of batches of similar length
        (sorted by number of ids), without the lines that hold no subword
        token (just END) unless not `skip_empty`; advances a
        `LineProgress` on standard output if asked (a redrawn line on a
        terminal, plain lines without escapes elsewhere)."""
        order = sorted(
            (i for i, ids in enumerate(sources) if len(ids) > 1 or not skip_empty),
            key=lambda i: len(sources[i]),
        )
        bar = LineProgress(len(sources), "sentences") if progress else None
        done = len(sources) - len(order)  # the empty lines
        if bar is not None and sources and not order:
            bar.update(len(sources))
        for start in range(0, len(order), self.batch_size):
            batch = order[start : start + self.batch_size]
            width = self._padded_length(max(len(sources[i]) for i in batch))
            source_ids = np.zeros((len(batch), width), "int32")
            for row, i in enumerate(batch):
                source_ids[row, : len(sources[i])] = sources[i]
            yield batch, source_ids
            if bar is not None:
                bar.update(done + start + len(batch))  # finalizes at the last

    def _prefix_ids(self, prefixes: Any, count: int) -> list[list[int]] | None:
        """The subword ids of each target prefix (no END), or None."""
        if prefixes is None:
            return None
        prefixes = _check_lines("prefixes", prefixes)
        if len(prefixes) != count:
            raise ValueError(
                f"translate got {count} lines but {len(prefixes)} prefixes; pass "
                'one prefix per line ("" for none).'
            )
        return self.tokenizer.encode(prefixes)

    def _phrase_ids(
        self, constraints: Sequence[Sequence[str]] | None, count: int
    ) -> list[list[list[int]]] | None:
        """The constraint phrases of each line as token ids; every phrase
        starts unmet (`_record_unmet` clears those a translation holds).

        A phrase holding text that the vocabulary lacks would be "met" by
        outputs holding the unknown piece ``⁇``: it is left out of the search
        and recorded, with those parts, in `unknown_constraint_pieces`.
        """
        self.unknown_constraint_pieces, self._searched_phrases = [], []
        if constraints is None:
            self.unmet_constraints = []
            return None
        if isinstance(constraints, str) or len(constraints) != count:
            raise ValueError(
                "constraints must hold one list of phrases per line: got "
                f"{len(constraints)} for {count} lines."
            )
        self.unmet_constraints = [list(phrases) for phrases in constraints]
        unknown_id = self.tokenizer.UNK_ID
        phrase_ids = []
        for phrases in constraints:
            encoded = self.tokenizer.encode(list(phrases)) if phrases else []
            unknown = {
                phrase: self.tokenizer.unknown_pieces(phrase)
                for phrase, ids in zip(phrases, encoded, strict=True)
                if unknown_id in ids
            }
            searched = [j for j, ids in enumerate(encoded) if unknown_id not in ids]
            self.unknown_constraint_pieces.append(unknown)
            self._searched_phrases.append(searched)
            phrase_ids.append([encoded[j] for j in searched])
        return phrase_ids

    def _record_unmet(
        self,
        constraints: Sequence[Sequence[str]] | None,
        batch: Sequence[int],
        result: DecodeResult,
    ) -> None:
        """Per line of `batch`, the phrases it misses: those its output lacks
        and those left out of the search (`_phrase_ids`), in their order."""
        if constraints is None or result.unmet_constraints is None:
            return
        for i, unmet in zip(batch, result.unmet_constraints, strict=True):
            searched = self._searched_phrases[i]
            missed = {searched[j] for j in unmet}
            missed |= set(range(len(constraints[i]))) - set(searched)
            self.unmet_constraints[i] = [constraints[i][j] for j in sorted(missed)]

    # -- text ----------------------------------------------------------------
    def translate(
        self,
        lines: Sequence[str],
        progress: bool = False,
        *,
        n_best: int | None = None,
        prefixes: Sequence[str] | None = None,
        constraints: Sequence[Sequence[str]] | None = None,
    ) -> list[Any]:
        """One translation per line, in order; ``""`` for a line without any
        subword token (``""``, whitespace).

        Lines are tokenized once, decoded in batches of similar length
        (sorted by their number of subword ids, then put back in order), and
        detokenized.

        Args:
            lines: the sentences.
            progress: show the progress on standard output (`LineProgress`:
                a redrawn line on a terminal, plain lines elsewhere).
            n_best: return, per line, the list of its `n_best` best
                translations as ``(text, score)`` pairs, best first (beam
                search, ``n_best <= beam_size``; the score is
                ``log P / lp(Y)``, Wu et al. 2016 Eq. 14). A line without
                subword tokens gives ``[("", 0.0)]``.
            prefixes: per line, target text its translation must start with
                (``""``: none); tokenized like the targets. The forced tokens
                add 0 to the score.
            constraints: per line, target phrases its translation must
                contain (terminology; tokenized with the run's SentencePiece
                model): constrained beam search (Post and Vilar 2018). The
                phrases a translation misses are in `unmet_constraints`.

        Returns:
            One string per line, or with `n_best` one list of pairs per line.

        Raises:
            ValueError: (one line) when `constraints` or `prefixes` has not one
                entry per line, or `constraints` come with `n_best`.

        Example:
        >>> translator.translate(["Ein Hund."], n_best=2)  # doctest: +SKIP
        [[('A dog.', -0.41), ('One dog.', -1.73)]]
        """
        if constraints is not None and n_best is not None:
            raise ValueError(
                "n_best lists and constraints cannot be combined; translate "
                "with constraints alone (its best hypothesis)."
            )
        sources = self.encode(lines)
        prefix_ids = self._prefix_ids(prefixes, len(sources))
        phrase_ids = self._phrase_ids(constraints, len(sources))
        settings = self.settings
        if n_best is not None:
            settings = settings.replace(n_best=n_best)
        empty: Any = "" if n_best is None else [("", 0.0)]
        outputs = [empty] * len(sources)
        for batch, source_ids in self._batches(sources, progress):
            prefix_rows = None if prefix_ids is None else [prefix_ids[i] for i in batch]
            phrase_rows = None if phrase_ids is None else [phrase_ids[i] for i in batch]
            texts = self._translate_batch(
                source_ids,
                settings,
                batch,
                prefix_rows,
                n_best is not None,
                phrase_rows,
                constraints,
            )
            for i, text in zip(batch, texts, strict=True):
                outputs[i] = text
        return outputs

    def _translate_batch(
        self,
        source_ids: np.ndarray,
        settings: DecodeSettings,
        batch: list[int],
        prefixes: list[list[int]] | None,
        n_best: bool,
        phrase_ids: list[list[list[int]]] | None = None,
        constraints: Sequence[Sequence[str]] | None = None,
    ) -> list[Any]:
        """The texts of one batch (lines `batch`), or with `n_best` their
        lists of ``(text, score)`` (`settings.n_best` each; `translate`)."""
        decoder = self._decoder()
        options = {
            "max_length": self.max_output_length,
            "start_id": self.tokenizer.START_ID,
            "end_id": self.tokenizer.END_ID,
            "prefixes": prefixes,
        }
        if not n_best:
            seed = None if self.seed is None else self.seed + batch[0]
            result = decoder.decode(
                source_ids, settings, seed=seed, constraints=phrase_ids, **options
            )
            self._record_unmet(constraints, batch, result)
            return self.tokenizer.decode(result.token_ids.tolist())
        lists = decoder.n_best(source_ids, settings, **options)
        return [
            list(
                zip(
                    self.tokenizer.decode(ids.tolist()),
                    (float(score) for score in scores),
                    strict=True,
                )
            )
            for ids, scores in zip(lists.token_ids, lists.scores, strict=True)
        ]

    def score(
        self, sources: Sequence[str], targets: Sequence[str]
    ) -> list[TargetScore]:
        """Forced decoding: the log-probability of each target given its source.

        Sources are cut as for `translate`; targets are tokenized whole and
        END is scored last. Uses the model's uncached call with teacher
        forcing (`Decoder.score`), in batches of similar source length.

        Args:
            sources: the source sentences.
            targets: one target sentence per source.

        Returns:
            One `TargetScore` per pair, in order: ``log_prob`` = log P(Y | X)
            and ``token_log_probs`` (END last). A pair whose source has no
            subword token is scored too (its source is just END).

        Example:
        >>> translator.score(["Ein Hund."], ["A dog."])[0].log_prob  # doctest: +SKIP
        -0.38
        """
        sources, targets = _check_line_pairs(
            "sources",
            sources,
            targets,
            "score got {lines} sources but {references} targets; pass one target "
            "per source, in the same order.",
        )
        if self.ensemble:
            raise ValueError(
                "score uses one model; score with a translator of one run "
                "(Translator.from_run) instead of an ensemble."
            )
        source_ids = self.encode(sources)
        target_ids = self.tokenizer.encode(targets)
        scores: list[Any] = [None] * len(sources)
        decoder = get_decoder(self.model, self.jit_compile)
        for batch, padded in self._batches(source_ids, False, skip_empty=False):
            result = decoder.score(
                padded,
                [target_ids[i] for i in batch],
                start_id=self.tokenizer.START_ID,
                end_id=self.tokenizer.END_ID,
            )
            tokens = result.to_list()
            for row, i in enumerate(batch):
                log_prob = float(result.log_probs[row])
                scores[i] = TargetScore(log_prob, tuple(tokens[row]))
        return scores

    def evaluate(
        self,
        sources: Sequence[str],
        references: Sequence[str],
        *,
        split: str = "test",
        hypotheses_path: str | os.PathLike[str] | None = None,
        log_dir: str | os.PathLike[str] | None = None,
        step: int = 0,
        progress: bool = False,
    ) -> EvaluationResult:
        """Translates `sources` and scores them against `references`.

        Args:
            sources: the source sentences.
            references: one reference translation per source.
            split: a name for the sentences, e.g. ``"test_2016_flickr"``.
            hypotheses_path: write the translations there, one per line.
            log_dir: log ``bleu``, ``chrf`` and ``exact_match`` (scalars) and
                the sacrebleu signatures (text) there for TensorBoard.
            step: the TensorBoard step.
            progress: show a progress bar.

        Reference: Vaswani et al. (2017), §6.1; Post (2018).
        """
        sources, references = _check_line_pairs(
            "sources", sources, references, _SOURCES_MISMATCH
        )
        hypotheses = self.translate(sources, progress=progress)
        if hypotheses_path is not None:
            write_lines(hypotheses_path, hypotheses)
        result = EvaluationResult(
            split=split,
            num_sentences=len(references),
            translations=tuple(
                Translation(s, r, h)
                for s, r, h in zip(sources, references, hypotheses, strict=True)
            ),
            settings=self.settings,
            hypotheses_path=None if hypotheses_path is None else str(hypotheses_path),
            log_dir=None if log_dir is None else str(log_dir),
            **score_translations(hypotheses, references),
        )
        if log_dir is not None:
            log_scores(result, log_dir, step)
        return result


def translate_lines(
    model: keras.Model,
    tokenizer: SubwordTokenizer,
    lines: Sequence[str],
    *,
    progress: bool = False,
    **settings: Any,
) -> list[str]:
    """Translates sentences with beam search (§6.1) or greedily.

    ``Translator(model, tokenizer, **settings).translate(lines, progress)``:
    the settings (`DecodeSettings` fields such as ``beam_size``, ``alpha``,
    ``max_input_length``, ``extra_length``, and ``batch_size``,
    ``jit_compile``, ...) are those of `Translator`.

    Returns:
        One detokenized translation per line, in order; ``""`` for a line
        without any subword token.

    Reference: Vaswani et al. (2017), §6.1.
    """
    lines = _check_lines("lines", lines)
    return Translator(model, tokenizer, **settings).translate(lines, progress)


# ----------------------------------------------------------------- scoring
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
    """
    from sacrebleu.metrics import BLEU, CHRF

    hypotheses, references = _check_line_pairs(
        "hypotheses",
        hypotheses,
        references,
        "There are {lines} hypotheses but {references} references; every "
        "sentence needs one of each.",
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
            (read-only, no permission, full disk).
    """
    import tensorflow as tf

    log_dir = Path(log_dir)
    try:
        writer = tf.summary.create_file_writer(str(log_dir))
        _write_scores(writer, result, step)
    except (OSError, tf.errors.OpError) as e:
        raise write_error(
            log_dir, as_os_error(e), kept="no scores were logged there"
        ) from e


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


# ------------------------------------------------------------------ models
def load_translator(
    path: str | os.PathLike[str], weights: str = "last"
) -> tuple[keras.Model, SubwordTokenizer]:
    """The model and tokenizer of a training run or of an export folder.

    Args:
        path: a ``keras-transformer train`` work directory (read with
            `keras_transformer.runs.RunFolder`), or a folder written by
            ``keras-transformer export`` (its ``model.keras`` and
            ``tokenizer/``, read with `keras_transformer.runs.load_export`).
        weights: for a training run: ``"last"``, ``"best"``, ``"average"`` or
            the path of a checkpoint or ``.weights.h5`` file.
    """
    path = Path(path)
    if is_export_dir(path):
        model, tokenizer, _ = load_export(path)
        return model, tokenizer
    if not path.exists():
        raise FileNotFoundError(
            f"{path} does not exist. Pass the --workdir of a `keras-transformer "
            "train` run or a folder written by `keras-transformer export`."
        )
    if not path.is_dir():
        raise NotADirectoryError(
            f"{path} is a file, not a folder. Pass the --workdir of a "
            "`keras-transformer train` run or a folder written by "
            "`keras-transformer export`."
        )
    folder = RunFolder(path)
    if folder.config_file.is_file() and folder.kind() != "translation":
        raise ValueError(
            f"{path} is a run of kind {folder.kind()!r} (its config.json), not a "
            "translation run: a Translator loads translation runs and exports."
        )
    return folder.load(weights)


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
            ``batch_size``, ...).

    Returns:
        An `EvaluationResult`: ``bleu``, ``chrf`` (0-100), their sacrebleu
        signatures, ``exact_match``, and every translation.

    Reference: Vaswani et al. (2017), §6.1; Post (2018), "A Call for Clarity
    in Reporting BLEU Scores".
    """
    sources, references = _check_line_pairs(
        "source_sentences", source_sentences, references, _SOURCES_MISMATCH
    )
    if isinstance(model_or_workdir, keras.Model):
        if tokenizer is None:
            raise ValueError(
                "evaluate(model, ...) needs the model's tokenizer: pass "
                "tokenizer=..., or pass the run's work directory instead of the "
                "model."
            )
        model = model_or_workdir
    else:
        if tokenizer is not None:
            raise ValueError(
                "Pass `tokenizer` only with a model: a work directory or export "
                "folder brings its own tokenizer."
            )
        model, tokenizer = load_translator(model_or_workdir, weights)
    return Translator(model, tokenizer, **settings).evaluate(
        sources,
        references,
        split=split,
        hypotheses_path=hypotheses_path,
        log_dir=log_dir,
        step=step,
        progress=progress,
    )


# ------------------------------------------------------------------- files
def read_lines(path: str | os.PathLike[str] | None) -> list[str]:
    """The lines of a UTF-8 text file (or of standard input for None / "-").

    Lines are split on ``"\\n"`` only (a trailing ``"\\r"`` is removed), so the
    count matches ``wc -l``; a final line without newline counts too.
    """
    if path is None or str(path) == "-":
        data = sys.stdin.buffer.read()
        name = "standard input"
    else:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"{path} does not exist (or is not a file).")
        data = path.read_bytes()
        name = str(path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise ValueError(
            f"{name} is not valid UTF-8 (line {line}, byte {e.start}). Convert it, "
            "e.g. with `iconv -f latin1 -t utf-8`."
        ) from None
    if text.startswith("\ufeff"):
        text = text[1:]
    if not text:
        return []
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def write_lines(path: str | os.PathLike[str] | None, lines: Sequence[str]) -> None:
    """Writes one line per string, UTF-8 (standard output for None / "-").

    A file is written whole or not at all (`write_atomically`).

    Raises:
        FileWriteError: one line naming the file when it cannot be written.
    """
    data = "".join(f"{line}\n" for line in lines).encode("utf-8")
    if path is None or str(path) == "-":
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        return
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise write_error(path, e) from e
    write_atomically(path, data)

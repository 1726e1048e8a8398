"""`Translator`: text in, text out, scores (Vaswani et al. 2017, §6.1).

Text lines -> subword ids once (`keras_transformer.data.batching.
encode_sources`, the source-cut rule shared with the exported SavedModel)
-> batches sorted by length -> the search of `keras_transformer.decoding`
(greedy, beam search, sampling; n-best lists, prefixes, terminology
constraints) -> text. `translate_lines` is the same as a function.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator, Sequence
from typing import Any

import keras
import numpy as np

from keras_transformer import validation
from keras_transformer.data.batching import DEFAULT_BUCKET_BOUNDARIES, encode_sources
from keras_transformer.data.tokenizer import SubwordTokenizer
from keras_transformer.decoding import DecodeResult, DecodeSettings, get_decoder
from keras_transformer.decoding.settings import settings_with
from keras_transformer.models.transformer import TransformerStack
from keras_transformer.progress import LineProgress
from keras_transformer.source_limits import warn_cut_sources
from keras_transformer.translation.lines import (
    SOURCES_MISMATCH,
    check_line_pairs,
    check_lines,
    refuse_empty_pairs,
    write_lines,
)
from keras_transformer.translation.loading import (
    load_translator,
    with_export_settings,
)
from keras_transformer.translation.scores import (
    EvaluationResult,
    TargetScore,
    log_scores,
)


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

    Raises:
        ValueError: (one line) when the tokenizer's vocabulary size is not
            that of the model (or of an `ensemble` model), or for a bad
            setting.

    Attributes:
        cut_lines: the indices (from 0) of the sources of the last `encode`
            (`translate`, `evaluate`) call that were longer than
            `source_limit` (`max_input_length`, or the model's learned source
            positions where they are fewer) and were cut to it.
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
        # A tokenizer of another vocabulary gives ids that mean other pieces
        # (or lie outside the embedding): refused before any translation.
        for each in (model, *ensemble):
            tokenizer.check_compatible(
                TransformerStack.of(each).target_embedding.vocabulary_size
            )
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
        """A translator for a training run or an export folder (`load_translator`).

        An export folder decodes with the settings it was exported with
        (`with_export_settings`), as its SavedModel does; the `settings`
        given here (`DecodeSettings` fields, or a whole ``settings=``
        object) replace them."""
        validation.check_path("`path`", path)
        settings = with_export_settings(path, settings)  # before the slow load
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
            TypeError: `paths` is one folder, not a list of them, or holds
                something that is not a path.
            ValueError: (one line) without paths, naming a folder twice (a
                model averaged with itself translates as the model alone), or
                naming two runs whose SentencePiece models differ.
        """
        if isinstance(paths, (str, os.PathLike)):
            raise TypeError(
                "`paths` must be a list of run or export folders; wrap one folder "
                f"in a list, or use Translator.load. Received: {paths!r}"
            )
        if not paths:
            raise ValueError("from_runs needs at least one run folder; got none.")
        for path in paths:
            validation.check_path("Each of `paths`", path)
        folders = [os.path.realpath(path) for path in paths]
        for index, folder in enumerate(folders):
            if folder in folders[:index]:
                raise ValueError(
                    f"from_runs got {paths[index]} twice; a model averaged with "
                    "itself translates as the model alone: name each run once."
                )
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
        lines = check_lines("lines", lines)
        self.cut_lines = ()
        if not lines:
            return []
        # One id more than the cap: a row that reaches it was longer than
        # the cap, and keeps the first `limit - 1` tokens and END, as
        # `encode_sources(..., limit)` gives (each line is tokenized once).
        limit = self.source_limit
        rows = encode_sources(self.tokenizer, lines, limit + 1).to_list()
        cut = [i for i, row in enumerate(rows) if len(row) > limit]
        if cut:
            for i in cut:
                rows[i] = rows[i][: limit - 1] + rows[i][-1:]
            self.cut_lines = tuple(cut)
        if cut and self.warn_on_cut:
            if limit < self.max_input_length:
                cap = f"the model's {limit} learned source positions"
                remedy = "a model with more positions (max_length) reads more"
            else:
                cap = f"max_input_length={limit} subword ids"
                remedy = "pass a larger max_input_length to keep more of them"
            where = "Translator.cut_lines"
            warn_cut_sources(cut, len(lines), cap, limit - 1, where, remedy)
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
        return self._search(
            np.asarray(source_ids, "int32"),
            self.settings,
            prefixes=prefixes,
            seed=seed,
            constraints=constraints,
        )

    def _search(
        self, source_ids: np.ndarray, settings: DecodeSettings, **inputs: Any
    ) -> Any:
        """`Decoder.decode` of the model (or ensemble) with the tokenizer's
        ids, the output cap and the call's `inputs` (prefixes, seed,
        constraints, n_best)."""
        return self._decoder().decode(
            source_ids,
            settings,
            max_length=self.max_output_length,
            start_id=self.tokenizer.START_ID,
            end_id=self.tokenizer.END_ID,
            **inputs,
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

    @property
    def source_limit(self) -> int:
        """The longest source the encoder reads, in subword ids (END
        included): `max_input_length`, capped at the learned source
        positions of the model and of each `ensemble` model (sinusoids,
        §3.5, have no cap), so that a longer source is cut, not refused by
        the position embedding."""
        positions = [
            TransformerStack.of(model).max_source_length
            for model in (self.model, *self.ensemble)
        ]
        return min([self.max_input_length, *(p for p in positions if p)])

    def _padded_length(self, length: int) -> int:
        limit = self.source_limit
        for boundary in sorted(self.bucket_boundaries):
            if length <= boundary < limit:
                return boundary
        return limit

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
        bar = progress if hasattr(progress, "update") else None
        bar = bar or (LineProgress(len(sources), "sentences") if progress else None)
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
        prefixes = check_lines("prefixes", prefixes)
        if len(prefixes) != count:
            raise ValueError(
                f"translate got {validation.count_of(count, 'line')} but "
                f"{validation.count_of(len(prefixes), 'prefix', 'prefixes')}; pass "
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
                f"{len(constraints)} for {validation.count_of(count, 'line')}."
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
        progress: bool | Any = False,
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
                a redrawn line on a terminal, plain lines elsewhere), or
                report it to a `LineProgress.part` (lines done, from 0).
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
        seed = None if self.seed is None else self.seed + batch[0]
        result = self._search(
            source_ids,
            settings,
            prefixes=prefixes,
            seed=seed,
            constraints=phrase_ids,
            n_best=settings.n_best if n_best else None,
        )
        if not n_best:
            self._record_unmet(constraints, batch, result)
            return self.tokenizer.decode(result.token_ids.tolist())
        return [
            list(
                zip(
                    self.tokenizer.decode(ids.tolist()), map(float, scores), strict=True
                )
            )
            for ids, scores in zip(result.token_ids, result.scores, strict=True)
        ]

    def score(
        self,
        sources: Sequence[str],
        targets: Sequence[str],
        progress: bool | Any = False,
    ) -> list[TargetScore]:
        """Forced decoding: the log-probability of each target given its source.

        Sources are cut as for `translate`; targets are tokenized whole and
        END is scored last. Uses the model's uncached call with teacher
        forcing (`Decoder.score`), in batches of similar source length.

        Args:
            sources: the source sentences.
            targets: one target sentence per source.
            progress: show the progress on standard output, as `translate`
                does (or a `LineProgress.part` to advance).

        Returns:
            One `TargetScore` per pair, in order: ``log_prob`` = log P(Y | X)
            and ``token_log_probs`` (END last). A pair whose source has no
            subword token is scored too (its source is just END).

        Example:
        >>> translator.score(["Ein Hund."], ["A dog."])[0].log_prob  # doctest: +SKIP
        -0.38
        """
        sources, targets = check_line_pairs(
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
        for batch, padded in self._batches(source_ids, progress, skip_empty=False):
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

        Raises:
            ValueError: (one line) for a pair whose source or reference is
                empty or blank (`refuse_empty_pairs`: BLEU would hide a
                misaligned file), before anything is translated; for no
                pairs at all (`score_translations`).

        Reference: Vaswani et al. (2017), §6.1; Post (2018).
        """
        sources, references = check_line_pairs(
            "sources", sources, references, SOURCES_MISMATCH
        )
        refuse_empty_pairs(sources, references)
        hypotheses = self.translate(sources, progress=progress)
        if hypotheses_path is not None:
            write_lines(hypotheses_path, hypotheses)
        result = EvaluationResult.scored(
            sources,
            references,
            hypotheses,
            self.settings,
            split=split,
            hypotheses_path=hypotheses_path,
            log_dir=log_dir,
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
    lines = check_lines("lines", lines)
    return Translator(model, tokenizer, **settings).translate(lines, progress)


__all__ = ["Translator", "translate_lines"]

"""`Decoder`: the one public entry point of decoding.

``Decoder(model).decode(source_ids, settings)`` checks its inputs, runs the
search that `settings` names (`DecodeSettings.strategy`, built by the
strategy registry with the call's inputs: prefixes, constraints, n-best) as
one compiled `tf.function` and returns a `DecodeResult` (an `NBestResult`
with `n_best`). `Decoder.search` is the same search as TensorFlow ops, for a
caller's own `tf.function` (an exported SavedModel). `Decoder.score` is
forced decoding (teacher forcing), not a search.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from keras_transformer import validation
from keras_transformer.conventions import END_ID, PAD_ID, START_ID
from keras_transformer.decoding.result import DecodeResult, NBestResult, ScoreResult
from keras_transformer.decoding.search import Outputs, Prefix, run_search
from keras_transformer.decoding.settings import DecodeSettings, default_setting
from keras_transformer.decoding.steps import ModelStep, cached_step, uncached_step
from keras_transformer.decoding.strategies import SearchOptions, get_strategy
from keras_transformer.decoding.strategies.constrained import (
    check_phrase_ids,
    pad_phrases,
    unmet_phrases,
)
from keras_transformer.models.transformer import TransformerStack

#: The static length of the caches is rounded up to a multiple of this (when
#: `max_length` is not given), so sources of similar lengths share one trace.
_LENGTH_BUCKET = 16


class Decoder:
    """Compiled decoding (greedy, beam search, sampling) for one model.

    Runs the model through its `TransformerStack`: the encoder once, then one
    `decode_beam_step` per output token, in one `tf.while_loop`
    (`search.run_search`). In a TensorFlow graph (the default) the caches
    grow by one position per step and an example leaves the batch as soon as
    it has finished; compiled with XLA (`jit_compile=True`) every shape stays
    static: caches of the maximum length written by index, rounded up to a
    multiple of 16 so that nearby source lengths share a compilation. Both
    give the same outputs. One `tf.function` serves every search, traced
    again only for new static arguments (method, beam size, top-k, ids),
    without AutoGraph: the search is TensorFlow ops as written.

    Args:
        model: a model from `build_transformer` (or loaded from its file).
        jit_compile: compile the decoding loop with XLA.
        use_cache: False runs the decoder on the whole prefix at every step
            (no key/value caches): the reference the cached search must
            equal, and the baseline of `benchmarks/decode.py`. A graph, never
            XLA (the prefix grows).

    Example:
    >>> import numpy as np, keras_transformer as kt
    >>> model = kt.models.build_transformer(kt.models.presets["tiny"])
    >>> settings = DecodeSettings(method="greedy")
    >>> Decoder(model).decode(np.array([[5, 6, 3]]), settings, max_length=4).lengths
    array([4], dtype=int32)

    Reference: Vaswani et al. (2017), §6.1; Wu et al. (2016).
    """

    def __init__(
        self, model: keras.Model, jit_compile: bool = False, use_cache: bool = True
    ) -> None:
        if keras.backend.backend() != "tensorflow":
            raise ValueError(
                "keras_transformer.decoding needs the TensorFlow backend. "
                f"Received: backend={keras.backend.backend()!r}"
            )
        self.model = model
        self.use_cache = use_cache
        self.jit_compile = jit_compile and use_cache
        self.stack = TransformerStack.of(model)
        #: The stacks whose steps `_model_step` combines (an ensemble's several).
        self.stacks = [self.stack]
        self.vocabulary_size: int = self.stack.target_embedding.vocabulary_size
        self.max_supported_length: int | None = self.stack.max_target_length
        self._search_fn = tf.function(
            self._search_with_fields,
            jit_compile=self.jit_compile,
            reduce_retracing=True,
            autograph=False,
        )
        self._score_fn = tf.function(
            self.forced_log_probs, reduce_retracing=True, autograph=False
        )

    # ---------------------------------------------------------- public API
    def decode(
        self,
        source_ids: Any,
        settings: DecodeSettings | None = None,
        *,
        max_length: int | None = None,
        seed: int | None = None,
        start_id: int = START_ID,
        end_id: int | None = END_ID,
        prefixes: Any = None,
        constraints: Sequence[Sequence[Sequence[int]]] | None = None,
        n_best: int | None = None,
    ) -> DecodeResult | NBestResult:
        """Decodes a batch of source ids with the search `settings` names:
        the one NumPy entry point of every search.

        Args:
            source_ids: int `(batch, source_length)`, 0 for padding.
            settings: the search (`method`, `beam_size`, `alpha`,
                `temperature`, `top_k`, `top_p`; default `DecodeSettings()`,
                §6.1) and `extra_length`: each example may generate its
                number of real source tokens + `extra_length` tokens (§6.1:
                "input length + 50").
            max_length: cap on the number of generated tokens (END included);
                must not exceed what the model supports (learned positions).
            seed: makes a sample reproducible; drawn from NumPy's global
                generator when None (sampling only).
            start_id: the first decoder input.
            end_id: the token that ends a sequence; None decodes exactly the
                maximum length (for benchmarks).
            prefixes: per example, the target ids its output must start with
                (a list of id lists, or an int array padded with 0); they
                are given, not chosen, so they add 0 to the score.
            constraints: per example, the target phrases (lists of token
                ids) its output must contain: lexically constrained beam
                search (`ConstrainedBeamSearch`, Post and Vilar 2018) with
                the settings' beam (greedy: a beam of one); not with
                sampling.
            n_best: return the `n_best` best hypotheses of each source
                (`NBestBeamSearch`: an example stops early only once its
                `n_best`-th best finished hypothesis beats every live one;
                the first is the best output's); greedy decoding and
                sampling give a list of one. Not with `constraints`.

        Returns:
            A `DecodeResult`: scores are summed log-probabilities (greedy,
            sampling) or the length-normalised score of the best hypothesis
            (beam search); with `constraints`, its `unmet_constraints` lists
            the phrases each output misses (none unless one cannot be met).
            With `n_best`, an `NBestResult`: ids, scores `log P / lp(Y)`, raw
            `log P` and lengths, `(batch, n_best, ...)`, best first.

        Raises:
            ValueError: (one line) on bad ids, constraints or settings.

        Reference: Wu et al. (2016), Eq. 14; Vaswani et al. (2017), §6.1.
        """
        settings = settings or DecodeSettings()
        strategy = settings.strategy
        if n_best is not None:
            if constraints is not None:
                raise ValueError(
                    "n_best lists and constraints cannot be combined; decode "
                    "with one or the other."
                )
            settings.replace(n_best=n_best)  # checks it against the search
        source, limits, length = self._prepare(
            source_ids, max_length, settings.extra_length
        )
        for name, value in (("start_id", start_id), ("end_id", end_id)):
            if value is not None:
                validation.check_int(name, value, 0, self.vocabulary_size - 1)
        if strategy != "sample":
            seed = 0  # unused: NumPy's global generator stays untouched
        elif seed is None:
            seed = int(np.random.randint(0, 2**31 - 1))
        validation.check_int("seed", seed, 0)
        phrases = self._phrases(constraints, len(source))
        traced = _traced_settings(settings)
        # Built once eagerly: a strategy refuses the call's inputs in one line.
        get_strategy(
            strategy,
            SearchOptions(
                traced, settings.alpha, settings.temperature, seed, n_best, phrases
            ),
        )
        outputs = self._search_fn(
            source,
            limits,
            tf.constant(settings.alpha, tf.float32),
            tf.constant(settings.temperature, tf.float32),
            tf.constant(seed, tf.int32),
            self._prefix(prefixes, len(source)),
            fields=dataclasses.astuple(traced),
            n_best=n_best,
            # Shapes may change in a graph: one trace serves every length.
            max_length=length if self.jit_compile else tf.constant(length, tf.int32),
            start_id=start_id,
            end_id=end_id,
            static_shapes=self.jit_compile,
            constraints=phrases,
        )
        outputs = [np.asarray(x) for x in outputs]
        if n_best is None:
            result = DecodeResult.from_outputs(*outputs)
            if constraints is not None:
                result.unmet_constraints = unmet_phrases(
                    result.token_ids, result.lengths, constraints
                )
            return result
        if len(outputs) == 3:  # one hypothesis per example: lists of one
            token_ids, scores, lengths = (x[:, None] for x in outputs)
            outputs = [token_ids, scores, scores, lengths]
        return NBestResult.from_outputs(*outputs)

    def score(
        self,
        source_ids: Any,
        targets: Any,
        *,
        start_id: int = START_ID,
        end_id: int = END_ID,
    ) -> ScoreResult:
        """Forced decoding: `log P(Y | X)` of given targets, token by token.

        Teacher forcing through the model's own (uncached) call: the decoder
        reads START and the target, and each position's log-softmax is read
        at the next target token, END last (Eq. 1 of Wu et al. 2016: the
        log-probability a search ranks by, before the length penalty).

        Args:
            source_ids: int `(batch, source_length)`, 0 for padding.
            targets: per example, its target ids without START and END (a
                list of id lists, or an int array padded with 0).
            start_id, end_id: the tokenizer's special ids.

        Returns:
            A `ScoreResult`: per-token log-probabilities (END included), their
            sums and the number of tokens scored.

        Example:
        >>> import numpy as np, keras_transformer as kt
        >>> model = kt.models.build_transformer(kt.models.presets["tiny"])
        >>> Decoder(model).score(np.array([[5, 6, 3]]), [[7, 8]]).lengths
        array([3], dtype=int32)
        """
        source = tf.constant(
            _checked_source(source_ids, self.stack.source_embedding.vocabulary_size),
            tf.int32,
        )
        rows = _id_rows("targets", targets, len(source), self.vocabulary_size)
        width = max(len(row) for row in rows) + 1
        supported = self.max_supported_length
        if supported is not None and width > supported:
            raise ValueError(
                f"A target of {width - 1} tokens (+ END) is longer than the model "
                f"supports: its learned target positions stop at {supported}. "
                f"Score targets of at most {supported - 1} tokens."
            )
        inputs = np.zeros((len(rows), width), "int32")
        labels = np.zeros((len(rows), width), "int32")
        for i, row in enumerate(rows):
            inputs[i, : len(row) + 1] = [start_id, *row]
            labels[i, : len(row) + 1] = [*row, end_id]
        token_log_probs = self._score_fn(source, tf.constant(inputs), labels)
        token_log_probs = np.asarray(token_log_probs, "float32")
        return ScoreResult(
            token_log_probs=token_log_probs,
            log_probs=token_log_probs.sum(axis=1, dtype="float64").astype("float32"),
            lengths=(labels != PAD_ID).sum(axis=1).astype("int32"),
        )

    def search(
        self,
        source_ids: tf.Tensor,
        limits: tf.Tensor,
        settings: DecodeSettings | None = None,
        *,
        max_length: int | tf.Tensor,
        seed: int | tf.Tensor = 0,
        start_id: int = START_ID,
        end_id: int | None = END_ID,
        static_shapes: bool = False,
        prefix: Prefix | None = None,
        constraints: tf.Tensor | None = None,
        n_best: int | None = None,
    ) -> tuple[tf.Tensor, ...]:
        """`decode` as TensorFlow ops, without its checks, for a caller's
        `tf.function` (the SavedModel's signatures): the one ops entry point
        of every search.

        Args:
            source_ids: int32 `(batch, source_length)`, 0 for padding.
            limits: int32 `(batch,)`: the maximum output length of each
                example, END included, at most `max_length`; 0 gives an
                empty output.
            settings: as for `decode` (`extra_length` is not read: `limits`
                holds it).
            max_length: size of the outputs: a Python int, or with
                `static_shapes=False` a scalar int32 tensor.
            seed: int32 scalar of a sample.
            start_id, end_id: as for `decode`.
            static_shapes: keep every shape static, as XLA needs.
            prefix: `(token_ids (batch, prefix_length), lengths (batch,))`:
                the target ids each output starts with (`search.force_prefix`).
            constraints: int32 `(batch, phrases, phrase_length)`, 0 after a
                phrase, a row of zeros for none (`pad_phrases`): the strategy
                runs `ConstrainedBeamSearch` (Post and Vilar 2018).
            n_best: beam search returns `NBestBeamSearch`'s lists of this
                many hypotheses instead of the best one.

        Returns:
            `(token_ids (batch, max_length), scores (batch,), lengths (batch,))`,
            or with `n_best` (beam search) `NBestBeamSearch.result`'s
            ``(token_ids, scores, log_probs, lengths)``, each
            `(batch, n_best, ...)`.
        """
        settings = settings or DecodeSettings()
        return self._search(
            source_ids,
            limits,
            tf.constant(settings.alpha, tf.float32),
            tf.constant(settings.temperature, tf.float32),
            tf.cast(seed, tf.int32),
            prefix,
            settings=settings,
            n_best=n_best,
            max_length=max_length,
            start_id=start_id,
            end_id=end_id,
            static_shapes=static_shapes,
            constraints=None if constraints is None else tf.cast(constraints, tf.int32),
        )

    # ------------------------------------------------------------ internals
    def _search_with_fields(self, *args: Any, fields: tuple, **kwargs: Any) -> Outputs:
        """`_search` with its settings given as their field values: the
        compiled search's trace key (a `tf.function` traces again for every
        new `DecodeSettings` object, but not for an equal tuple)."""
        return self._search(*args, settings=DecodeSettings(*fields), **kwargs)

    def _search(
        self,
        source_ids: tf.Tensor,
        limits: tf.Tensor,
        alpha: tf.Tensor,
        temperature: tf.Tensor,
        seed: tf.Tensor,
        prefix: Prefix | None = None,
        *,
        settings: DecodeSettings,
        max_length: int | tf.Tensor,
        start_id: int,
        end_id: int | None,
        static_shapes: bool,
        n_best: int | None = None,
        constraints: tf.Tensor | None = None,
    ) -> Outputs:
        """The search: the registered strategy (built with the call's
        inputs), the model step and the loop, with tensor settings."""
        strategy = settings.strategy
        beam = settings.beam_size if strategy == "beam" else 1
        options = SearchOptions(settings, alpha, temperature, seed, n_best, constraints)
        model_step = self._model_step(
            source_ids, max_length, beam, start_id, static_shapes
        )
        return run_search(
            get_strategy(strategy, options),
            model_step.step,
            model_step.state,
            limits,
            max_length=max_length,
            start_id=start_id,
            end_id=end_id,
            drop_finished=self.use_cache and not static_shapes,
            gather_state=model_step.gather,
            state_shape_invariants=model_step.invariants,
            prefix=prefix,
        )

    def _model_step(
        self,
        source_ids: tf.Tensor,
        max_length: int | tf.Tensor,
        beam: int,
        start_id: int,
        static_shapes: bool,
    ) -> ModelStep:
        """The model's step function (cached or not) of `beam` rows per
        example: one per stack of `stacks`, put together by `_combine`."""
        steps = [
            cached_step(stack, source_ids, max_length, beam, static_shapes)
            if self.use_cache
            else uncached_step(stack, source_ids, max_length, beam, start_id)
            for stack in self.stacks
        ]
        return self._combine(steps, beam)

    def _combine(self, steps: list[ModelStep], beam: int) -> ModelStep:
        """The one model's step (`EnsembleDecoder` averages several)."""
        (step,) = steps
        return step

    def forced_log_probs(
        self, source_ids: tf.Tensor, inputs: tf.Tensor, labels: tf.Tensor
    ) -> tf.Tensor:
        """`score` as TensorFlow ops (teacher forcing), for a caller's graph.

        Args:
            source_ids: int32 `(batch, source_length)`, 0 for padding.
            inputs: int32 `(batch, length)`: START, then the target, then 0.
            labels: int32 `(batch, length)`: the target, END, then 0.

        Returns:
            float32 `(batch, length)`: `log P(labels[t] | inputs[:t + 1], X)`,
            0 where `labels` is padding.
        """
        logits = self.model((source_ids, inputs), training=False)
        log_probs = tf.nn.log_softmax(tf.cast(logits, tf.float32))
        labels = tf.cast(labels, tf.int32)
        # (batch, length): the log-probability of each label.
        picked = tf.gather(log_probs, labels[..., None], batch_dims=2)[..., 0]
        return tf.where(tf.equal(labels, PAD_ID), 0.0, picked)

    def _phrases(self, constraints: Any, batch: int) -> tf.Tensor | None:
        """The constraint phrases as a padded int32 tensor, or a one-line error."""
        if constraints is None:
            return None
        if len(constraints) != batch:
            raise ValueError(
                f"constraints must hold one list of phrases per source: got "
                f"{len(constraints)} for {batch} sources."
            )
        check_phrase_ids(constraints, self.vocabulary_size)
        return tf.constant(pad_phrases(constraints), tf.int32)

    def _prefix(self, prefixes: Any, batch: int) -> Prefix | None:
        """`prefixes` as the search's `(token_ids, lengths)`, or None."""
        if prefixes is None:
            return None
        rows = _id_rows("prefixes", prefixes, batch, self.vocabulary_size)
        ids = np.zeros((batch, max(1, *(len(row) for row in rows))), "int32")
        for i, row in enumerate(rows):
            ids[i, : len(row)] = row
        lengths = np.array([len(row) for row in rows], "int32")
        return tf.constant(ids), tf.constant(lengths)

    def _prepare(
        self, source_ids: Any, max_length: int | None, extra_length: int
    ) -> tuple[tf.Tensor, tf.Tensor, int]:
        """Validates the source and the output cap.

        Returns:
            The source ids, the maximum output length of each example (its
            number of real source tokens + `extra_length`, capped; §6.1) and
            the static size of the outputs and caches.
        """
        validation.check_int("max_length", max_length, 1, allow_none=True)
        supported = self.max_supported_length
        if max_length is not None and supported is not None and max_length > supported:
            raise ValueError(
                f"max_length={max_length} is longer than the model supports: its "
                f"learned target positions stop at {supported}. Pass max_length "
                f"<= {supported}, or train a model with a larger max_length."
            )
        source = _checked_source(
            source_ids, self.stack.source_embedding.vocabulary_size
        )
        length = -(-(source.shape[1] + extra_length) // _LENGTH_BUCKET) * _LENGTH_BUCKET
        for cap in (max_length, supported):
            length = length if cap is None else min(length, cap)
        limits = np.minimum((source != PAD_ID).sum(axis=1) + extra_length, length)
        return tf.constant(source, tf.int32), tf.constant(limits, tf.int32), length


def _checked_source(source_ids: Any, vocabulary_size: int) -> np.ndarray:
    """`source_ids` as a NumPy array, or a one-line `ValueError`."""
    source = np.asarray(source_ids)
    if source.ndim != 2 or not np.issubdtype(source.dtype, np.integer):
        raise ValueError(
            "`source_ids` must be integer token ids of shape (batch, "
            f"source_length). Received: source_ids.shape={source.shape}, "
            f"dtype={source.dtype}"
        )
    if source.shape[0] == 0 or source.shape[1] == 0:
        raise ValueError(
            "`source_ids` must hold at least one example and one token. "
            f"Received: source_ids.shape={source.shape}"
        )
    if source.min() < 0 or source.max() >= vocabulary_size:
        raise ValueError(
            f"`source_ids` must be token ids in [0, {vocabulary_size}). "
            f"Received: ids from {source.min()} to {source.max()}"
        )
    return source


def _id_rows(name: str, rows: Any, batch: int, vocabulary_size: int) -> list[list[int]]:
    """`rows` (id lists, or an int array padded with 0) as `batch` lists of
    ids without padding, or a one-line `ValueError`."""
    if isinstance(rows, np.ndarray) and rows.ndim == 2:
        rows = [[int(t) for t in row if t != PAD_ID] for row in rows]
    rows = [[int(t) for t in row] for row in rows]
    if len(rows) != batch:
        raise ValueError(
            f"`{name}` must hold one id list per source: got {len(rows)} for "
            f"{batch} sources."
        )
    for i, row in enumerate(rows):
        if any(t <= PAD_ID or t >= vocabulary_size for t in row):
            raise ValueError(
                f"`{name}[{i}]` must hold token ids in [1, {vocabulary_size}). "
                f"Received: {row}"
            )
    return rows


_DECODERS_ATTRIBUTE = "_keras_transformer_decoders"


def get_decoder(
    model: keras.Model, jit_compile: bool = False, use_cache: bool = True
) -> Any:
    """The `Decoder` of `model`, created once and then reused.

    The decoders are kept in a private attribute of the model (set without
    Keras' tracking), so they live and die with it.
    """
    decoders = getattr(model, _DECODERS_ATTRIBUTE, None)
    if decoders is None:
        decoders = {}
        object.__setattr__(model, _DECODERS_ATTRIBUTE, decoders)
    key = (jit_compile, use_cache)
    if key not in decoders:
        decoders[key] = Decoder(model, jit_compile=jit_compile, use_cache=use_cache)
    return decoders[key]


def _traced_settings(settings: DecodeSettings) -> DecodeSettings:
    """`settings` as the compiled search's trace key: what the search does
    not read as a Python value at its default, so that calls differing only
    there share a trace (`alpha` and `temperature` are tensors, `limits`
    hold the lengths, `n_best` is the call's input; the beam size outside
    beam search, top-k and top-p outside sampling). A setting added later
    is part of the key."""
    unread = ("alpha", "temperature", "extra_length", "max_input_length", "n_best")
    strategy, sample = settings.strategy, settings.strategy == "sample"
    return settings.replace(
        method=strategy,
        beam_size=settings.beam_size if strategy == "beam" else 1,
        top_k=settings.top_k if sample else None,
        top_p=settings.top_p if sample else None,
        **{name: default_setting(name) for name in unread},
    )


__all__ = ["Decoder", "get_decoder"]

"""Inference: greedy decoding, beam search (§6.1) and sampling.

"We used beam search with a beam size of 4 and length penalty alpha = 0.6
... We set the maximum output length during inference to input length + 50,
but terminate early when possible." (Vaswani et al. 2017, §6.1). The length
penalty is the one of Wu et al. (2016), "Google's Neural Machine Translation
System", Eq. 14: `lp(Y) = ((5 + |Y|) / 6) ** alpha`, and a finished
hypothesis is ranked by `log P(Y | X) / lp(Y)`.

Every decoder runs the encoder once (`TransformerStack.encode`) and then feeds
one token per step through `TransformerStack.decode_step` (key/value caches of
static size, written by index). The whole loop is a single `tf.while_loop`
inside one `tf.function` (optionally compiled with XLA), cached per model by
`Decoder`; `Decoder.greedy_graph` and `Decoder.beam_search_graph` are the same
loops for use inside a caller's own `tf.function` (e.g. an exported
SavedModel).

The search algorithms (`run_greedy`, `run_beam_search`) only see a *step
function* `step_fn(token_ids, state, index) -> (log_probs, state)`, so they can
be driven by anything, e.g. a table of fixed log-probabilities in the tests.

Token ids: 0 is padding and is never generated; by default 2 starts and 3 ends
a sequence. Outputs hold the generated tokens (END included, the start token
excluded) followed by zeros.

Example:
>>> import numpy as np, keras_transformer as kt
>>> from keras_transformer import decoding
>>> model = kt.models.build_transformer(kt.models.presets["tiny"])
>>> result = decoding.beam_search(model, np.array([[5, 6, 7, 3]]), max_length=8)
>>> result.token_ids.shape[0], result.scores.shape
(1, (1,))
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from keras_transformer.conventions import END_ID, EXTRA_LENGTH, PAD_ID, START_ID
from keras_transformer.models.transformer import DecoderCaches, TransformerStack

#: Former name of `keras_transformer.conventions.PAD_ID`, kept importable.
PADDING_ID = PAD_ID
#: Cache entries of a `DecoderBlock` that do not change while decoding and are
#: the same for every beam of one example (so beam search never reorders them).
_STATIC_CACHE_KEYS = ("cross_keys", "cross_values")
#: The static length of the caches is rounded up to a multiple of this (when
#: `max_length` is not given), so sources of similar lengths share one trace.
_LENGTH_BUCKET = 16

StepFunction = Callable[[tf.Tensor, Any, tf.Tensor], tuple[tf.Tensor, Any]]
"""`(token_ids (n,), state, index) -> (log_probs (n, vocabulary), state)`."""


@dataclasses.dataclass
class DecodeResult:
    """Output of a decoder.

    Attributes:
        token_ids: int32 `(batch, length)`: the generated tokens, END
            included, then 0 (padding). The start token is not included.
        scores: float32 `(batch,)`: the log-probability of the output
            (greedy, sampling), or the length-normalised score
            `log P(Y | X) / lp(Y)` of the best hypothesis (beam search).
        lengths: int32 `(batch,)`: the number of generated tokens, END
            included (a sequence cut at the maximum length has no END).
    """

    token_ids: np.ndarray
    scores: np.ndarray
    lengths: np.ndarray

    def to_list(self, strip_end: bool = False, end_id: int = END_ID) -> list[list[int]]:
        """The outputs as lists of ids, without padding (and END if asked)."""
        outputs = []
        for row, length in zip(self.token_ids, self.lengths, strict=True):
            ids = [int(t) for t in row[: int(length)]]
            if strip_end and ids and ids[-1] == end_id:
                ids = ids[:-1]
            outputs.append(ids)
        return outputs


# ------------------------------------------------------------------- helpers
def length_penalty(length: Any, alpha: float) -> Any:
    """`lp(Y) = ((5 + |Y|) / 6) ** alpha` of Wu et al. (2016), Eq. 14.

    `alpha = 0` gives 1 (no normalisation); the paper (§6.1) uses 0.6.
    Works on Python numbers, numpy arrays and tensors.
    """
    if isinstance(length, (int, float, np.ndarray, np.number)):
        return ((5.0 + np.asarray(length, "float64")) / 6.0) ** alpha
    length = tf.cast(length, tf.float32)
    return tf.pow((5.0 + length) / 6.0, alpha)


def check_length_penalty(length_penalty: Any) -> None:
    """Raises `ValueError` unless alpha is a finite number >= 0 (§6.1: 0.6)."""
    if (
        isinstance(length_penalty, bool)
        or not isinstance(length_penalty, (int, float))
        or not math.isfinite(length_penalty)
        or length_penalty < 0
    ):
        raise ValueError(
            "`length_penalty` (alpha) must be a number >= 0 (§6.1: 0.6). "
            f"Received: length_penalty={length_penalty!r}"
        )


def check_integer(name: str, value: Any, minimum: int) -> None:
    """Raises `ValueError` unless `value` is an integer >= `minimum`."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"`{name}` must be an integer. Received: {name}={value!r}")
    if value < minimum:
        raise ValueError(f"`{name}` must be >= {minimum}. Received: {name}={value!r}")


def _check_token_id(name: str, value: Any, vocabulary_size: int | None) -> None:
    check_integer(name, value, 0)
    if vocabulary_size is not None and value >= vocabulary_size:
        raise ValueError(
            f"`{name}` must be a token id below the vocabulary size "
            f"{vocabulary_size}. Received: {name}={value!r}"
        )


def _mask_padding(log_probs: tf.Tensor) -> tf.Tensor:
    """Makes the padding id impossible: it marks the end of an output."""
    vocabulary = tf.shape(log_probs)[-1]
    is_padding = tf.equal(tf.range(vocabulary), PAD_ID)
    return tf.where(is_padding, tf.constant(-np.inf, log_probs.dtype), log_probs)


def _write(buffer: tf.Tensor, index: tf.Tensor, values: tf.Tensor) -> tf.Tensor:
    """`buffer[..., index] = values` for a `(..., length)` buffer (XLA-friendly)."""
    at_index = tf.equal(tf.range(tf.shape(buffer)[-1]), index)
    return tf.where(at_index, values[..., None], buffer)


# ------------------------------------------------------------ search drivers
def run_greedy(
    step_fn: StepFunction,
    state: Any,
    limits: Any,
    *,
    max_length: int,
    start_id: int = START_ID,
    end_id: int | None = END_ID,
    select_fn: Callable[[tf.Tensor, tf.Tensor], tf.Tensor] | None = None,
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """Greedy (or sampled) decoding as one `tf.while_loop`.

    Args:
        step_fn: `(token_ids (batch,), state, index) -> (log_probs (batch,
            vocabulary), state)`; `index` is the position of `token_ids`.
        state: the initial state (any nest of tensors), passed through.
        limits: int `(batch,)`: the maximum output length of each example.
        max_length: static bound on `limits`, the size of the outputs.
        start_id: the first decoder input.
        end_id: the token that finishes a sequence; `None` never finishes
            early (always `limits` tokens).
        select_fn: `(log_probs, index) -> token_ids` choosing the next tokens;
            the argmax when `None`.

    Returns:
        `(token_ids (batch, max_length), scores (batch,), lengths (batch,))`:
        tokens padded with 0 after END, summed log-probabilities, lengths.
    """
    limits = tf.cast(tf.convert_to_tensor(limits), tf.int32)
    batch = tf.shape(limits)[0]
    end = -1 if end_id is None else end_id

    def cond(index, token_ids, last, scores, lengths, done, state):
        return tf.logical_not(tf.reduce_all(done))

    def body(index, token_ids, last, scores, lengths, done, state):
        log_probs, state = step_fn(last, state, index)
        log_probs = _mask_padding(tf.cast(log_probs, tf.float32))
        if select_fn is None:
            chosen = tf.argmax(log_probs, axis=-1, output_type=tf.int32)
        else:
            chosen = tf.cast(select_fn(log_probs, index), tf.int32)
        chosen_log_prob = tf.gather(log_probs, chosen[:, None], batch_dims=1)[:, 0]
        chosen = tf.where(done, PAD_ID, chosen)
        scores += tf.where(done, 0.0, chosen_log_prob)
        lengths += tf.cast(tf.logical_not(done), tf.int32)
        token_ids = _write(token_ids, index, chosen)
        done = done | tf.equal(chosen, end) | (index + 1 >= limits)
        return index + 1, token_ids, chosen, scores, lengths, done, state

    loop_vars = (
        tf.constant(0, tf.int32),
        tf.zeros((batch, max_length), tf.int32),
        tf.fill((batch,), tf.constant(start_id, tf.int32)),
        tf.zeros((batch,), tf.float32),
        tf.zeros((batch,), tf.int32),
        limits <= 0,
        state,
    )
    _, token_ids, _, scores, lengths, _, _ = tf.while_loop(
        cond, body, loop_vars, maximum_iterations=max_length
    )
    return token_ids, scores, lengths


def run_beam_search(
    step_fn: StepFunction,
    state: Any,
    limits: Any,
    *,
    max_length: int,
    beam_size: int = 4,
    length_penalty_alpha: float | tf.Tensor = 0.6,
    start_id: int = START_ID,
    end_id: int | None = END_ID,
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """Beam search with the GNMT length penalty (§6.1; Wu et al. 2016).

    Each step extends the `beam_size` live hypotheses of every example by every
    token and keeps the `2 * beam_size` best candidates (by log-probability).
    Those ending in END and ranked within the first `beam_size` become finished
    hypotheses, scored `log P / lp(length)`; the `beam_size` best finished ones
    are kept. The `beam_size` best candidates not ending in END are the new
    live hypotheses (there are always enough: at most `beam_size` candidates
    end in END). An example stops early when its worst kept finished score
    beats the best live log-probability divided by the largest penalty it may
    still get, `lp(limit)`, because log-probabilities only decrease. An
    example without any finished hypothesis returns its best live one, scored
    with `lp(limit)`.

    Args:
        step_fn: `(token_ids (batch * beam,), state, index) -> (log_probs
            (batch * beam, vocabulary), state)`. Row `b * beam_size + k` is
            hypothesis `k` of example `b`; every tensor of `state` (leading
            dimension `batch * beam_size`) is gathered by the parent hypothesis
            after each step.
        state: the initial state, already repeated `beam_size` times per
            example (`tf.repeat(x, beam_size, axis=0)`).
        limits: int `(batch,)`: the maximum output length of each example.
        max_length: static bound on `limits`, the size of the outputs.
        beam_size: number of hypotheses kept per example.
        length_penalty_alpha: `alpha`; 0 ranks by raw log-probability.
        start_id: the first decoder input.
        end_id: the token that finishes a hypothesis; `None` for none.

    Returns:
        `(token_ids (batch, max_length), scores (batch,), lengths (batch,))`
        of the best hypothesis of each example.
    """
    limits = tf.cast(tf.convert_to_tensor(limits), tf.int32)
    batch = tf.shape(limits)[0]
    beam = beam_size
    end = -1 if end_id is None else end_id
    neg_inf = tf.constant(-np.inf, tf.float32)
    # The largest penalty a hypothesis of each example can still receive.
    max_penalty = length_penalty(limits, length_penalty_alpha)
    # (batch, beam): only the first live hypothesis exists at the start.
    initial_log_probs = tf.tile(
        tf.constant([[0.0] + [-np.inf] * (beam - 1)], tf.float32), [batch, 1]
    )
    candidate_in_beam = tf.range(2 * beam) < beam
    example_offsets = (tf.range(batch) * beam)[:, None]

    def cond(index, *loop_vars: Any) -> tf.Tensor:
        done = loop_vars[-2]
        return tf.logical_not(tf.reduce_all(done))

    def body(
        index,
        alive_ids,
        alive_log_probs,
        alive_last,
        finished_ids,
        finished_scores,
        finished_lengths,
        done,
        state,
    ):
        log_probs, state = step_fn(tf.reshape(alive_last, [-1]), state, index)
        log_probs = _mask_padding(tf.cast(log_probs, tf.float32))
        vocabulary = tf.shape(log_probs)[-1]
        # (batch, beam * vocabulary): log P of every one-token extension.
        candidates = tf.reshape(
            alive_log_probs[:, :, None]
            + tf.reshape(log_probs, [batch, beam, vocabulary]),
            [batch, beam * vocabulary],
        )
        top_log_probs, top_indices = tf.math.top_k(candidates, k=2 * beam)
        parents = top_indices // vocabulary
        tokens = top_indices % vocabulary
        # (batch, 2 * beam, max_length)
        candidate_ids = _write(
            tf.gather(alive_ids, parents, batch_dims=1), index, tokens
        )
        is_end = tf.equal(tokens, end)

        # Live hypotheses: the best `beam` candidates not ending in END.
        new_alive_log_probs, picked = tf.math.top_k(
            tf.where(is_end, neg_inf, top_log_probs), k=beam
        )
        new_alive_ids = tf.gather(candidate_ids, picked, batch_dims=1)
        new_alive_last = tf.gather(tokens, picked, batch_dims=1)
        new_parents = tf.gather(parents, picked, batch_dims=1)

        # Finished hypotheses: merge the new ones with those kept so far.
        new_scores = tf.where(
            is_end & candidate_in_beam,
            top_log_probs / length_penalty(index + 1, length_penalty_alpha),
            neg_inf,
        )
        merged_scores = tf.concat([finished_scores, new_scores], axis=1)
        new_finished_scores, picked = tf.math.top_k(merged_scores, k=beam)
        merged_ids = tf.concat([finished_ids, candidate_ids], axis=1)
        new_finished_ids = tf.gather(merged_ids, picked, batch_dims=1)
        merged_lengths = tf.concat(
            [finished_lengths, tf.fill([batch, 2 * beam], index + 1)], axis=1
        )
        new_finished_lengths = tf.gather(merged_lengths, picked, batch_dims=1)

        # Examples already done keep their hypotheses.
        def keep(old: tf.Tensor, new: tf.Tensor) -> tf.Tensor:
            frozen = tf.reshape(done, [-1] + [1] * (len(new.shape) - 1))
            return tf.where(frozen, old, new)

        alive_ids = keep(alive_ids, new_alive_ids)
        alive_log_probs = keep(alive_log_probs, new_alive_log_probs)
        alive_last = keep(alive_last, new_alive_last)
        finished_ids = keep(finished_ids, new_finished_ids)
        finished_scores = keep(finished_scores, new_finished_scores)
        finished_lengths = keep(finished_lengths, new_finished_lengths)

        # Reorder the state (e.g. the self-attention caches) by parent.
        rows = tf.reshape(example_offsets + new_parents, [-1])
        state = tf.nest.map_structure(lambda x: tf.gather(x, rows), state)

        # GNMT early stopping: no live hypothesis can beat the worst finished.
        best_possible = alive_log_probs[:, 0] / max_penalty
        cannot_improve = finished_scores[:, -1] > best_possible
        done = done | cannot_improve | (index + 1 >= limits)
        return (
            index + 1,
            alive_ids,
            alive_log_probs,
            alive_last,
            finished_ids,
            finished_scores,
            finished_lengths,
            done,
            state,
        )

    loop_vars = (
        tf.constant(0, tf.int32),
        tf.zeros((batch, beam, max_length), tf.int32),
        initial_log_probs,
        tf.fill((batch, beam), tf.constant(start_id, tf.int32)),
        tf.zeros((batch, beam, max_length), tf.int32),
        tf.fill((batch, beam), neg_inf),
        tf.zeros((batch, beam), tf.int32),
        limits <= 0,
        state,
    )
    (
        _,
        alive_ids,
        alive_log_probs,
        _,
        finished_ids,
        finished_scores,
        finished_lengths,
        _,
        _,
    ) = tf.while_loop(cond, body, loop_vars, maximum_iterations=max_length)
    has_finished = finished_scores[:, 0] > neg_inf
    token_ids = tf.where(has_finished[:, None], finished_ids[:, 0], alive_ids[:, 0])
    scores = tf.where(
        has_finished, finished_scores[:, 0], alive_log_probs[:, 0] / max_penalty
    )
    lengths = tf.where(has_finished, finished_lengths[:, 0], tf.maximum(limits, 0))
    return token_ids, scores, lengths


# ------------------------------------------------------------- model decoder
class Decoder:
    """Compiled greedy, beam-search and sampling decoders for one model.

    Runs the model through its `TransformerStack`: the encoder once, then one
    `decode_step` per output token. Holds one `tf.function` per search
    (traced again only for new static arguments or input shapes; the static
    output length is rounded up to a multiple of 16 so that nearby source
    lengths share a trace). The module functions `greedy_decode`,
    `beam_search` and `sample_decode` use a `Decoder` cached per model.

    `greedy`, `beam_search`, `sample` and `uncached_greedy` take NumPy-like
    inputs, check them and return a `DecodeResult`. `greedy_graph`,
    `beam_search_graph` and `sample_graph` are the searches themselves as
    TensorFlow ops, for use inside a caller's `tf.function` (e.g. the
    signature of an exported SavedModel).

    Args:
        model: a model from `build_transformer` (or loaded from its file).
        jit_compile: compile the decoding loops with XLA.

    Example:
    >>> import numpy as np, keras_transformer as kt
    >>> model = kt.models.build_transformer(kt.models.presets["tiny"])
    >>> decoder = Decoder(model)
    >>> decoder.greedy(np.array([[5, 6, 3]]), max_length=4).token_ids.shape[0]
    1

    Reference: Vaswani et al. (2017), §6.1; Wu et al. (2016).
    """

    def __init__(self, model: keras.Model, jit_compile: bool = False) -> None:
        if keras.backend.backend() != "tensorflow":
            raise ValueError(
                "keras_transformer.decoding needs the TensorFlow backend. "
                f"Received: backend={keras.backend.backend()!r}"
            )
        self.model = model
        self.jit_compile = jit_compile
        self.stack = TransformerStack.of(model)
        self.vocabulary_size: int = self.stack.target_embedding.vocabulary_size
        self.max_supported_length: int | None = self.stack.max_target_length

        def compiled(graph: Callable[..., Any], jit_compile: bool) -> Any:
            return tf.function(graph, jit_compile=jit_compile, reduce_retracing=True)

        self._greedy_fn = compiled(self.greedy_graph, jit_compile)
        self._sample_fn = compiled(self.sample_graph, jit_compile)
        self._beam_fn = compiled(self.beam_search_graph, jit_compile)
        self._uncached_fn = compiled(self._uncached_graph, False)  # its prefix grows

    # ---------------------------------------------------------- public API
    def greedy(
        self,
        source_ids: Any,
        *,
        max_length: int | None = None,
        extra_length: int = EXTRA_LENGTH,
        start_id: int = START_ID,
        end_id: int | None = END_ID,
    ) -> DecodeResult:
        """Greedy decoding; see `greedy_decode`."""
        return self._run(
            self._greedy_fn, source_ids, max_length, extra_length, start_id, end_id
        )

    def beam_search(
        self,
        source_ids: Any,
        *,
        beam_size: int = 4,
        length_penalty: float = 0.6,
        max_length: int | None = None,
        extra_length: int = EXTRA_LENGTH,
        start_id: int = START_ID,
        end_id: int | None = END_ID,
    ) -> DecodeResult:
        """Beam search; see `beam_search`."""
        check_integer("beam_size", beam_size, 1)
        check_length_penalty(length_penalty)
        return self._run(
            self._beam_fn,
            source_ids,
            max_length,
            extra_length,
            start_id,
            end_id,
            beam_size=beam_size,
            length_penalty=tf.constant(length_penalty, tf.float32),
        )

    def sample(
        self,
        source_ids: Any,
        *,
        temperature: float = 1.0,
        top_k: int | None = None,
        seed: int | None = None,
        max_length: int | None = None,
        extra_length: int = EXTRA_LENGTH,
        start_id: int = START_ID,
        end_id: int | None = END_ID,
    ) -> DecodeResult:
        """Top-k / temperature sampling; see `sample_decode`."""
        if not (isinstance(temperature, (int, float)) and temperature > 0):
            raise ValueError(
                "`temperature` must be a number > 0. "
                f"Received: temperature={temperature!r}"
            )
        if top_k is not None:
            check_integer("top_k", top_k, 1)
        if seed is None:
            seed = int(np.random.randint(0, 2**31 - 1))
        check_integer("seed", seed, 0)
        return self._run(
            self._sample_fn,
            source_ids,
            max_length,
            extra_length,
            start_id,
            end_id,
            temperature=tf.constant(temperature, tf.float32),
            top_k=top_k,
            seed=tf.constant(seed, tf.int32),
        )

    def uncached_greedy(
        self,
        source_ids: Any,
        *,
        max_length: int | None = None,
        extra_length: int = EXTRA_LENGTH,
        start_id: int = START_ID,
        end_id: int | None = END_ID,
    ) -> DecodeResult:
        """Greedy decoding without caches; see `uncached_greedy_decode`."""
        return self._run(
            self._uncached_fn, source_ids, max_length, extra_length, start_id, end_id
        )

    # ---------------------------------------------- in-graph search (public)
    def greedy_graph(
        self,
        source_ids: tf.Tensor,
        limits: tf.Tensor,
        *,
        max_length: int,
        start_id: int = START_ID,
        end_id: int | None = END_ID,
        select_fn: Callable[[tf.Tensor, tf.Tensor], tf.Tensor] | None = None,
    ) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """Greedy decoding with KV caches, as TensorFlow ops.

        What `greedy` runs in its `tf.function`, without its checks: call it
        inside your own `tf.function` (e.g. a SavedModel signature; graph
        and XLA friendly, all shapes static for a given `max_length`).

        Args:
            source_ids: int32 `(batch, source_length)`, 0 for padding.
            limits: int32 `(batch,)`: the maximum output length of each
                example, END included, at most `max_length` (§6.1: its real
                source tokens + `extra_length`); 0 gives an empty output.
            max_length: static size of the outputs and the caches.
            start_id: the first decoder input.
            end_id: the token that ends a sequence; `None` for none.
            select_fn: `(log_probs, index) -> token_ids` choosing the next
                tokens instead of the argmax (as in `run_greedy`; `sample_graph`
                passes a sampler).

        Returns:
            `(token_ids (batch, max_length), scores (batch,), lengths
            (batch,))`, as `run_greedy`.

        Reference: Vaswani et al. (2017), §6.1.
        """
        step, state = self._cached_step(source_ids, max_length)
        return run_greedy(
            step,
            state,
            limits,
            max_length=max_length,
            start_id=start_id,
            end_id=end_id,
            select_fn=select_fn,
        )

    def sample_graph(
        self,
        source_ids: tf.Tensor,
        limits: tf.Tensor,
        *,
        max_length: int,
        temperature: float | tf.Tensor = 1.0,
        top_k: int | None = None,
        seed: int | tf.Tensor = 0,
        start_id: int = START_ID,
        end_id: int | None = END_ID,
    ) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """Ancestral sampling with KV caches, as TensorFlow ops.

        Args:
            source_ids, limits, max_length, start_id, end_id: as for
                `greedy_graph`.
            temperature: float32 scalar > 0.
            top_k: sample only among the `top_k` most likely tokens (static).
            seed: int32 scalar; step `i` draws with the seed `(seed, i)`.

        Returns:
            As `greedy_graph`; scores are the model's log-probabilities.
        """
        return self.greedy_graph(
            source_ids,
            limits,
            max_length=max_length,
            start_id=start_id,
            end_id=end_id,
            select_fn=_sampler(seed, temperature, top_k),
        )

    def beam_search_graph(
        self,
        source_ids: tf.Tensor,
        limits: tf.Tensor,
        *,
        max_length: int,
        beam_size: int = 4,
        length_penalty: float | tf.Tensor = 0.6,
        start_id: int = START_ID,
        end_id: int | None = END_ID,
    ) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """Beam search with KV caches and the GNMT length penalty, as TensorFlow ops.

        Args:
            source_ids, limits, max_length, start_id, end_id: as for
                `greedy_graph`.
            beam_size: hypotheses kept per example (static).
            length_penalty: `alpha` (§6.1: 0.6), a number or float32 scalar.

        Returns:
            `(token_ids (batch, max_length), scores (batch,), lengths
            (batch,))` of the best hypothesis of each example, as
            `run_beam_search`.

        Reference: Vaswani et al. (2017), §6.1; Wu et al. (2016), Eq. 14.
        """
        step, state = self._cached_step(source_ids, max_length, repeats=beam_size)
        return run_beam_search(
            step,
            state,
            limits,
            max_length=max_length,
            beam_size=beam_size,
            length_penalty_alpha=length_penalty,
            start_id=start_id,
            end_id=end_id,
        )

    # ------------------------------------------------------------ checking
    def _run(
        self,
        graph_fn: Callable[..., tuple[tf.Tensor, tf.Tensor, tf.Tensor]],
        source_ids: Any,
        max_length: int | None,
        extra_length: int,
        start_id: int,
        end_id: int | None,
        **options: Any,
    ) -> DecodeResult:
        """Checks the arguments, runs one compiled search, collects the result."""
        source, limits, length = self._prepare(source_ids, max_length, extra_length)
        self._check_ids(start_id, end_id)
        outputs = graph_fn(
            source,
            limits,
            max_length=length,
            start_id=start_id,
            end_id=end_id,
            **options,
        )
        return _result(*outputs)

    def _prepare(
        self, source_ids: Any, max_length: int | None, extra_length: int
    ) -> tuple[tf.Tensor, tf.Tensor, int]:
        """Validates the arguments.

        Returns:
            The source ids, the maximum output length of each example (its
            number of real source tokens + `extra_length`, capped; §6.1) and
            the static size of the outputs and caches.
        """
        check_integer("extra_length", extra_length, 0)
        if max_length is not None:
            check_integer("max_length", max_length, 1)
            supported = self.max_supported_length
            if supported is not None and max_length > supported:
                raise ValueError(
                    f"max_length={max_length} is longer than the model supports: "
                    f"its learned target positions stop at {supported}. Pass "
                    f"max_length <= {supported}, or train a model with a larger "
                    "max_length."
                )
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
        if (
            source.min() < 0
            or source.max() >= self.stack.source_embedding.vocabulary_size
        ):
            raise ValueError(
                "`source_ids` must be token ids in [0, "
                f"{self.stack.source_embedding.vocabulary_size}). Received: ids "
                f"from {source.min()} to {source.max()}"
            )
        length = -(-(source.shape[1] + extra_length) // _LENGTH_BUCKET) * _LENGTH_BUCKET
        if max_length is not None:
            length = min(length, max_length)
        if self.max_supported_length is not None:
            length = min(length, self.max_supported_length)
        limits = np.minimum((source != PAD_ID).sum(axis=1) + extra_length, length)
        return (
            tf.constant(source, tf.int32),
            tf.constant(limits, tf.int32),
            length,
        )

    def _check_ids(self, start_id: int, end_id: int | None) -> None:
        _check_token_id("start_id", start_id, self.vocabulary_size)
        if end_id is not None:
            _check_token_id("end_id", end_id, self.vocabulary_size)

    # ------------------------------------------------------- traced graphs
    def _cached_step(
        self, source_ids: tf.Tensor, max_length: int, repeats: int = 1
    ) -> tuple[StepFunction, DecoderCaches]:
        """Encodes once; returns a step function and its initial state.

        The state is the self-attention caches of the decoder blocks. The
        encoder-decoder keys and values and the source padding mask are
        constants of the loop, repeated `repeats` times per example for
        beam search, which reorders only the state.
        """
        stack = self.stack
        encoder_output = stack.encode(source_ids, training=False)
        caches = stack.init_cache(encoder_output, max_length)

        def repeat(x: tf.Tensor) -> tf.Tensor:
            return x if repeats == 1 else tf.repeat(x, repeats, axis=0)

        padding_mask = repeat(tf.not_equal(source_ids, PAD_ID))
        static = [
            {key: repeat(cache[key]) for key in _STATIC_CACHE_KEYS} for cache in caches
        ]

        def step(token_ids: tf.Tensor, state: Any, index: tf.Tensor) -> Any:
            full = [{**s, **d} for s, d in zip(static, state, strict=True)]
            logits, full = stack.decode_step(
                token_ids[:, None], full, index, padding_mask
            )
            log_probs = tf.nn.log_softmax(tf.cast(logits[:, 0], tf.float32))
            return log_probs, [_changing_entries(cache) for cache in full]

        state = [
            {key: repeat(value) for key, value in _changing_entries(cache).items()}
            for cache in caches
        ]
        return step, state

    def _uncached_graph(
        self,
        source_ids: tf.Tensor,
        limits: tf.Tensor,
        *,
        max_length: int,
        start_id: int,
        end_id: int | None,
    ) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """Greedy decoding that runs `TransformerStack.decode` on the prefix."""
        stack = self.stack
        encoder_output = stack.encode(source_ids, training=False)
        padding_mask = tf.not_equal(source_ids, PAD_ID)
        batch = tf.shape(source_ids)[0]
        # The decoder inputs so far: START then the outputs (state of the loop).
        prefix = tf.concat(
            [
                tf.fill([batch, 1], tf.constant(start_id, tf.int32)),
                tf.zeros([batch, max_length], tf.int32),
            ],
            axis=1,
        )

        def step(token_ids: tf.Tensor, prefix: tf.Tensor, index: tf.Tensor) -> Any:
            prefix = _write(prefix, index, token_ids)
            # The whole prefix; only its last position is projected onto the
            # vocabulary. (batch, 1, vocabulary)
            logits = stack.decode(
                prefix[:, : index + 1],
                encoder_output,
                padding_mask,
                training=False,
                last_position_only=True,
            )
            return tf.nn.log_softmax(tf.cast(logits[:, 0], tf.float32)), prefix

        return run_greedy(
            step,
            prefix,
            limits,
            max_length=max_length,
            start_id=start_id,
            end_id=end_id,
        )


def _changing_entries(cache: dict[str, Any]) -> dict[str, Any]:
    """The entries of a block's cache that decoding updates (self-attention)."""
    return {key: value for key, value in cache.items() if key not in _STATIC_CACHE_KEYS}


def _sampler(
    seed: tf.Tensor, temperature: tf.Tensor, top_k: int | None
) -> Callable[[tf.Tensor, tf.Tensor], tf.Tensor]:
    """A `select_fn` drawing from `softmax(log_probs / temperature)`."""

    def select(log_probs: tf.Tensor, index: tf.Tensor) -> tf.Tensor:
        logits = log_probs / temperature
        if top_k is not None:
            k = tf.minimum(top_k, tf.shape(logits)[-1])
            kth_best = tf.math.top_k(logits, k=k).values[:, -1:]
            logits = tf.where(logits < kth_best, -np.inf, logits)
        step_seed = tf.stack([seed, index])
        return tf.random.stateless_categorical(
            logits, 1, seed=step_seed, dtype=tf.int32
        )[:, 0]

    return select


def _result(token_ids: Any, scores: Any, lengths: Any) -> DecodeResult:
    lengths = np.asarray(lengths, "int32")
    width = max(int(lengths.max(initial=0)), 1)
    return DecodeResult(
        token_ids=np.asarray(token_ids, "int32")[:, :width],
        scores=np.asarray(scores, "float32"),
        lengths=lengths,
    )


# --------------------------------------------------------- convenience API
_DECODERS_ATTRIBUTE = "_keras_transformer_decoders"


def get_decoder(model: keras.Model, jit_compile: bool = False) -> Decoder:
    """The `Decoder` of `model`, created once and then reused.

    The decoders are kept in a private attribute of the model (set without
    Keras' tracking), so they live and die with it.
    """
    decoders = getattr(model, _DECODERS_ATTRIBUTE, None)
    if decoders is None:
        decoders = {}
        object.__setattr__(model, _DECODERS_ATTRIBUTE, decoders)
    if jit_compile not in decoders:
        decoders[jit_compile] = Decoder(model, jit_compile=jit_compile)
    return decoders[jit_compile]


def greedy_decode(
    model: keras.Model,
    source_ids: Any,
    *,
    max_length: int | None = None,
    start_id: int = START_ID,
    end_id: int | None = END_ID,
    extra_length: int = EXTRA_LENGTH,
    jit_compile: bool = False,
) -> DecodeResult:
    """Greedy decoding: the most likely token at each step, with KV caches.

    Args:
        model: a model from `build_transformer`.
        source_ids: int `(batch, source_length)`, 0 for padding.
        max_length: cap on the number of generated tokens (END included);
            must not exceed what the model supports (learned positions).
        start_id: the first decoder input.
        end_id: the token that ends a sequence; `None` decodes exactly the
            maximum length (for benchmarks).
        extra_length: each example may generate its number of real source
            tokens + `extra_length` tokens (§6.1: "input length + 50").
        jit_compile: compile the loop with XLA.

    Returns:
        A `DecodeResult`; scores are summed log-probabilities.

    Reference: Vaswani et al. (2017), §6.1.
    """
    return get_decoder(model, jit_compile).greedy(
        source_ids,
        max_length=max_length,
        extra_length=extra_length,
        start_id=start_id,
        end_id=end_id,
    )


def beam_search(
    model: keras.Model,
    source_ids: Any,
    *,
    beam_size: int = 4,
    length_penalty: float = 0.6,
    max_length: int | None = None,
    extra_length: int = EXTRA_LENGTH,
    start_id: int = START_ID,
    end_id: int | None = END_ID,
    jit_compile: bool = False,
) -> DecodeResult:
    """Beam search with length penalty, as in the paper (§6.1).

    "We used beam search with a beam size of 4 and length penalty
    alpha = 0.6": hypotheses are ranked by `log P(Y | X) / lp(Y)` with
    `lp(Y) = ((5 + |Y|) / 6) ** alpha` (Wu et al. 2016), `|Y|` counting END.
    See `run_beam_search` for the algorithm.

    Args:
        model: a model from `build_transformer`.
        source_ids: int `(batch, source_length)`, 0 for padding.
        beam_size: hypotheses kept per example (4).
        length_penalty: `alpha` (0.6); 0 ranks by raw log-probability.
        max_length: cap on the number of generated tokens (END included).
        extra_length: each example may generate its number of real source
            tokens + `extra_length` tokens (§6.1).
        start_id, end_id: as for `greedy_decode`.
        jit_compile: compile the loop with XLA.

    Returns:
        A `DecodeResult` with the best hypothesis of each example and its
        length-normalised score.

    Reference: Vaswani et al. (2017), §6.1; Wu et al. (2016), §7.
    """
    return get_decoder(model, jit_compile).beam_search(
        source_ids,
        beam_size=beam_size,
        length_penalty=length_penalty,
        max_length=max_length,
        extra_length=extra_length,
        start_id=start_id,
        end_id=end_id,
    )


def sample_decode(
    model: keras.Model,
    source_ids: Any,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    seed: int | None = None,
    max_length: int | None = None,
    extra_length: int = EXTRA_LENGTH,
    start_id: int = START_ID,
    end_id: int | None = END_ID,
    jit_compile: bool = False,
) -> DecodeResult:
    """Ancestral sampling from `softmax(logits / temperature)`, optionally top-k.

    Args:
        model, source_ids, max_length, extra_length, start_id, end_id,
        jit_compile: as for `greedy_decode`.
        temperature: > 0; below 1 sharpens, above 1 flattens the distribution.
        top_k: sample only among the `top_k` most likely tokens.
        seed: makes the draw reproducible; drawn from NumPy's global generator
            when `None`.

    Returns:
        A `DecodeResult`; scores are the model's (temperature 1)
        log-probabilities of the sampled outputs.
    """
    return get_decoder(model, jit_compile).sample(
        source_ids,
        temperature=temperature,
        top_k=top_k,
        seed=seed,
        max_length=max_length,
        extra_length=extra_length,
        start_id=start_id,
        end_id=end_id,
    )


def uncached_greedy_decode(
    model: keras.Model,
    source_ids: Any,
    *,
    max_length: int | None = None,
    start_id: int = START_ID,
    end_id: int | None = END_ID,
    extra_length: int = EXTRA_LENGTH,
) -> DecodeResult:
    """Greedy decoding that re-runs the decoder on the whole prefix each step.

    The reference for `greedy_decode` (same outputs, up to float rounding) and
    the baseline of `benchmarks/decode.py`: the encoder runs once, but step
    `i` re-runs the decoder stack on all `i + 1` positions (O(length^2) work
    per sequence instead of O(length)); only the last position is projected
    onto the vocabulary. Compiled as a graph, not with XLA (the prefix
    grows).
    """
    return get_decoder(model).uncached_greedy(
        source_ids,
        max_length=max_length,
        extra_length=extra_length,
        start_id=start_id,
        end_id=end_id,
    )


__all__ = [
    "DecodeResult",
    "Decoder",
    "StepFunction",
    "beam_search",
    "get_decoder",
    "greedy_decode",
    "length_penalty",
    "run_beam_search",
    "run_greedy",
    "sample_decode",
    "uncached_greedy_decode",
]

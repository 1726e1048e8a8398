"""Inference: greedy decoding, beam search (§6.1) and sampling.

"We used beam search with a beam size of 4 and length penalty alpha = 0.6
... We set the maximum output length during inference to input length + 50,
but terminate early when possible." (Vaswani et al. 2017, §6.1). The length
penalty is the one of Wu et al. (2016), "Google's Neural Machine Translation
System", Eq. 14: `lp(Y) = ((5 + |Y|) / 6) ** alpha`, and a finished
hypothesis is ranked by `log P(Y | X) / lp(Y)`.

Every decoder runs the encoder once (`TransformerStack.encode`) and then feeds
one token per hypothesis and step through `TransformerStack.decode_beam_step`
(greedy decoding and sampling are its one-hypothesis case). The hypotheses of
an example share its encoder-decoder keys and values, and self-attention
caches with one slot per hypothesis and position that beam search never
reorders: after a step it reorders a small table of which slot holds each
hypothesis' past, not the caches. The whole loop is a single
`tf.while_loop` inside one `tf.function`, cached per model by `Decoder`. In a
TensorFlow graph (the default) the caches grow by one position per step and
an example leaves the batch as soon as it has finished, so the remaining
steps compute only the unfinished ones; compiled with XLA
(`jit_compile=True`) every shape stays static: caches of the maximum length
written by index, and every example computed until all have finished. Both
give the same outputs. `Decoder.greedy_graph` and `Decoder.beam_search_graph`
are the same loops for use inside a caller's own `tf.function` (e.g. an
exported SavedModel).

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
from functools import partial
from typing import Any, NamedTuple

import keras
import numpy as np
import tensorflow as tf

from keras_transformer.conventions import END_ID, EXTRA_LENGTH, PAD_ID, START_ID
from keras_transformer.models.transformer import TransformerStack

#: Former name of `keras_transformer.conventions.PAD_ID`, kept importable.
PADDING_ID = PAD_ID
#: The static length of the caches is rounded up to a multiple of this (when
#: `max_length` is not given), so sources of similar lengths share one trace.
_LENGTH_BUCKET = 16
#: The entries of a decoder block's cache that stay fixed while decoding.
_STATIC_CACHE_KEYS = ("cross_keys", "cross_values")

StepFunction = Callable[[tf.Tensor, Any, tf.Tensor], tuple[tf.Tensor, Any]]
"""`(token_ids (n,), state, index) -> (log_probs (n, vocabulary), state)`."""
GatherFunction = Callable[[Any, "tf.Tensor | None", "tf.Tensor | None"], Any]
"""`(state, examples, parents) -> state`: keeps the examples `examples` (int32
`(kept,)`, or None for all) of the state and, in beam search, puts each new
hypothesis in the place of its parent (`parents`, int32 `(kept, beam)`)."""


def _changing_entries(cache: dict[str, Any]) -> dict[str, Any]:
    """The entries of a block's cache that decoding updates (self-attention)."""
    return {key: value for key, value in cache.items() if key not in _STATIC_CACHE_KEYS}


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
class _Beams(NamedTuple):
    """What beam search keeps per example (one row each) between steps."""

    examples: tf.Tensor  # (n,) the example's row in the whole batch
    limits: tf.Tensor  # (n,) maximum output length
    max_penalty: tf.Tensor  # (n,) lp(limit), the largest penalty still possible
    alive_ids: tf.Tensor  # (n, beam, max_length)
    alive_log_probs: tf.Tensor  # (n, beam)
    alive_last: tf.Tensor  # (n, beam) the last token of each live hypothesis
    finished_ids: tf.Tensor  # (n, beam, max_length)
    finished_scores: tf.Tensor  # (n, beam) log P / lp(length), best first
    finished_lengths: tf.Tensor  # (n, beam)
    done: tf.Tensor  # (n,)


def _gather_rows(beam_size: int | None) -> GatherFunction:
    """The default `gather_state`: every state tensor has one row per
    hypothesis (`batch * beam_size` rows, or `batch` for greedy decoding)."""

    def gather(
        state: Any, examples: tf.Tensor | None, parents: tf.Tensor | None
    ) -> Any:
        if parents is None:  # greedy: one row per example
            rows = examples
        else:
            if examples is None:
                examples = tf.range(tf.shape(parents)[0])
            # (examples, beam) -> (examples * beam,)
            rows = tf.reshape(examples[:, None] * beam_size + parents, [-1])
        return tf.nest.map_structure(lambda x: tf.gather(x, rows), state)

    return gather


def _leading_dimension_free(structure: Any) -> Any:
    """Shape invariants with an unknown first dimension (examples leave)."""
    return tf.nest.map_structure(
        lambda x: tf.TensorShape([None, *x.shape[1:]]), structure
    )


def _shape_invariants(
    per_example: Any,
    state: Any,
    outputs: Any,
    drop_finished: bool,
    state_shape_invariants: Any,
) -> Any:
    """`tf.while_loop` shape invariants of `(index, per_example, state,
    outputs)`, or None when every shape stays as it is."""
    if not drop_finished and state_shape_invariants is None:
        return None

    def shapes(structure: Any) -> Any:
        return tf.nest.map_structure(lambda x: x.shape, structure)

    if state_shape_invariants is None:
        state_shape_invariants = _leading_dimension_free(state)
    return (
        tf.TensorShape([]),
        _leading_dimension_free(per_example) if drop_finished else shapes(per_example),
        state_shape_invariants,
        shapes(outputs),
    )


def _drop(
    done: tf.Tensor,
    per_example: tuple[tf.Tensor, ...],
    state: Any,
    gather_state: GatherFunction,
    parents: tf.Tensor | None,
) -> tuple[tuple[tf.Tensor, ...], Any]:
    """Removes the finished examples from the batch, or only reorders.

    Every tensor of `per_example` has one row per example; `state` goes
    through `gather_state` with the kept examples (and their hypotheses'
    parents), or with `examples=None` when no example finished (then only
    beam search reorders anything).
    """

    def keep_all() -> tuple[tuple[tf.Tensor, ...], Any]:
        if parents is None:
            return per_example, state
        return per_example, gather_state(state, None, parents)

    def keep_unfinished() -> tuple[tuple[tf.Tensor, ...], Any]:
        kept = tf.reshape(tf.where(tf.logical_not(done)), [-1])
        kept = tf.cast(kept, tf.int32)
        kept_parents = None if parents is None else tf.gather(parents, kept)
        return (
            tf.nest.map_structure(lambda x: tf.gather(x, kept), per_example),
            gather_state(state, kept, kept_parents),
        )

    return tf.cond(tf.reduce_any(done), keep_unfinished, keep_all)


def _scatter_finished(
    outputs: tuple[tf.Tensor, ...],
    examples: tf.Tensor,
    done: tf.Tensor,
    values: tuple[tf.Tensor, ...],
) -> tuple[tf.Tensor, ...]:
    """`outputs[i][examples[done]] = values[i][done]`: finished examples'
    results, written at their place in the whole batch."""
    finished = tf.where(done)  # (finished, 1)
    rows = tf.gather_nd(examples, finished)[:, None]
    return tuple(
        tf.tensor_scatter_nd_update(output, rows, tf.gather_nd(value, finished))
        for output, value in zip(outputs, values, strict=True)
    )


def run_greedy(
    step_fn: StepFunction,
    state: Any,
    limits: Any,
    *,
    max_length: int | tf.Tensor,
    start_id: int = START_ID,
    end_id: int | None = END_ID,
    select_fn: Callable[[tf.Tensor, tf.Tensor], tf.Tensor] | None = None,
    drop_finished: bool = False,
    gather_state: GatherFunction | None = None,
    state_shape_invariants: Any = None,
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """Greedy (or sampled) decoding as one `tf.while_loop`.

    Args:
        step_fn: `(token_ids (batch,), state, index) -> (log_probs (batch,
            vocabulary), state)`; `index` is the position of `token_ids`.
        state: the initial state (any nest of tensors), passed through.
        limits: int `(batch,)`: the maximum output length of each example.
        max_length: bound on `limits`, the size of the outputs: a Python
            int, or a scalar int32 tensor where shapes need not be static
            (not under XLA).
        start_id: the first decoder input.
        end_id: the token that finishes a sequence; `None` never finishes
            early (always `limits` tokens).
        select_fn: `(log_probs, index) -> token_ids` choosing the next tokens;
            the argmax when `None`.
        drop_finished: remove an example from the batch as soon as it has
            finished, so that the following steps compute only the unfinished
            ones (the batch shrinks: a TensorFlow graph, not XLA). The outputs
            do not change.
        gather_state: with `drop_finished`, `(state, examples, None) -> state`
            keeping the examples `examples` (int32 `(kept,)`, in order) of the
            state; by default every state tensor's rows are gathered.
        state_shape_invariants: the `tf.while_loop` shape invariants of the
            state, for a state whose shapes change from step to step; by
            default (with `drop_finished`) the first dimension is left free.

    Returns:
        `(token_ids (batch, max_length), scores (batch,), lengths (batch,))`:
        tokens padded with 0 after END, summed log-probabilities, lengths.
    """
    limits = tf.cast(tf.convert_to_tensor(limits), tf.int32)
    batch = tf.shape(limits)[0]
    end = -1 if end_id is None else end_id
    gather_state = gather_state or _gather_rows(None)

    def finish(per_example, state, outputs):
        """Writes the finished examples to `outputs` and drops them (with
        `drop_finished`)."""
        if not drop_finished:
            return per_example, state, outputs
        examples, _, token_ids, _, scores, lengths, done = per_example
        outputs = _scatter_finished(
            outputs, examples, done, (token_ids, scores, lengths)
        )
        per_example, state = _drop(done, per_example, state, gather_state, None)
        return per_example, state, outputs

    def cond(index, per_example, state, outputs) -> tf.Tensor:
        if drop_finished:
            return tf.size(per_example[0]) > 0
        return tf.logical_not(tf.reduce_all(per_example[-1]))

    def body(index, per_example, state, outputs):
        examples, limits, token_ids, last, scores, lengths, done = per_example
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
        per_example = (examples, limits, token_ids, chosen, scores, lengths, done)
        per_example, state, outputs = finish(per_example, state, outputs)
        return index + 1, per_example, state, outputs

    per_example = (
        tf.range(batch),
        limits,
        tf.zeros((batch, max_length), tf.int32),
        tf.fill((batch,), tf.constant(start_id, tf.int32)),
        tf.zeros((batch,), tf.float32),
        tf.zeros((batch,), tf.int32),
        limits <= 0,
    )
    outputs = (per_example[2], per_example[4], per_example[5])
    # Examples without any token to generate are finished before the loop.
    per_example, state, outputs = finish(per_example, state, outputs)
    _, per_example, _, outputs = tf.while_loop(
        cond,
        body,
        (tf.constant(0, tf.int32), per_example, state, outputs),
        shape_invariants=_shape_invariants(
            per_example, state, outputs, drop_finished, state_shape_invariants
        ),
        maximum_iterations=max_length,
    )
    if not drop_finished:
        _, _, token_ids, _, scores, lengths, _ = per_example
        return token_ids, scores, lengths
    # Examples still running when `max_length` stopped the loop.
    examples, _, token_ids, _, scores, lengths, done = per_example
    return _scatter_finished(
        outputs, examples, tf.ones_like(done), (token_ids, scores, lengths)
    )


def run_beam_search(
    step_fn: StepFunction,
    state: Any,
    limits: Any,
    *,
    max_length: int | tf.Tensor,
    beam_size: int = 4,
    length_penalty_alpha: float | tf.Tensor = 0.6,
    start_id: int = START_ID,
    end_id: int | None = END_ID,
    drop_finished: bool = False,
    gather_state: GatherFunction | None = None,
    state_shape_invariants: Any = None,
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """Beam search with the GNMT length penalty (§6.1; Wu et al. 2016).

    Each step extends the `beam_size` live hypotheses of every example by every
    token and keeps the `2 * beam_size` best candidates (by log-probability).
    Those ending in END and ranked within the first `beam_size` become finished
    hypotheses, scored `log P / lp(length)`; the `beam_size` best finished ones
    are kept. The `beam_size` best candidates not ending in END are the new
    live hypotheses (there are always enough: at most `beam_size` candidates
    end in END). An example stops early when its best finished score beats
    the best live log-probability divided by the largest penalty it may
    still get, `lp(limit)`: log-probabilities only decrease, so no live
    hypothesis can still beat it, and only the best hypothesis is returned
    (waiting until the worst kept finished one is beaten, as the previous
    release did, gives the same result after more steps). An example
    without any finished hypothesis returns its best live one, scored with
    `lp(limit)`.

    Args:
        step_fn: `(token_ids (batch * beam,), state, index) -> (log_probs
            (batch * beam, vocabulary), state)`. Row `b * beam_size + k` is
            hypothesis `k` of example `b`.
        state: the initial state. By default every tensor of it has one row
            per hypothesis (leading dimension `batch * beam_size`, e.g.
            `tf.repeat(x, beam_size, axis=0)`) and is gathered by the parent
            hypothesis after each step; `gather_state` replaces that.
        limits: int `(batch,)`: the maximum output length of each example.
        max_length: bound on `limits`, the size of the outputs: a Python
            int, or a scalar int32 tensor where shapes need not be static
            (not under XLA).
        beam_size: number of hypotheses kept per example.
        length_penalty_alpha: `alpha`; 0 ranks by raw log-probability.
        start_id: the first decoder input.
        end_id: the token that finishes a hypothesis; `None` for none.
        drop_finished: remove an example from the batch as soon as it is
            done, so that the following steps compute only the unfinished ones
            (the batch shrinks: a TensorFlow graph, not XLA). The outputs do
            not change.
        gather_state: `(state, examples, parents) -> state`, called after
            every step: `parents` int32 `(kept, beam_size)` is the parent
            hypothesis (in `0 .. beam_size - 1`) of each new live hypothesis
            of the kept examples, and `examples` is `None` (all examples kept,
            in order) or, with `drop_finished`, int32 `(kept,)`: the rows of
            the examples that stay. E.g. a state with per-example tensors and
            a small table of each hypothesis' ancestry (what `Decoder` uses)
            reorders only the table.
        state_shape_invariants: the `tf.while_loop` shape invariants of the
            state, for a state whose shapes change from step to step; by
            default (with `drop_finished`) the first dimension is left free.

    Returns:
        `(token_ids (batch, max_length), scores (batch,), lengths (batch,))`
        of the best hypothesis of each example.
    """
    limits = tf.cast(tf.convert_to_tensor(limits), tf.int32)
    batch = tf.shape(limits)[0]
    beam = beam_size
    end = -1 if end_id is None else end_id
    gather_state = gather_state or _gather_rows(beam)
    neg_inf = tf.constant(-np.inf, tf.float32)
    candidate_in_beam = tf.range(2 * beam) < beam

    def best(beams: _Beams) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """The result of each example: its best finished hypothesis, or its
        best live one scored with `lp(limit)` when none finished."""
        has_finished = beams.finished_scores[:, 0] > neg_inf
        return (
            tf.where(
                has_finished[:, None], beams.finished_ids[:, 0], beams.alive_ids[:, 0]
            ),
            tf.where(
                has_finished,
                beams.finished_scores[:, 0],
                beams.alive_log_probs[:, 0] / beams.max_penalty,
            ),
            tf.where(
                has_finished,
                beams.finished_lengths[:, 0],
                tf.maximum(beams.limits, 0),
            ),
        )

    def finish(
        beams: _Beams, parents: tf.Tensor | None, state: Any, outputs: Any
    ) -> tuple[_Beams, Any, Any]:
        """Reorders the state by parent; with `drop_finished`, also writes the
        finished examples to `outputs` and drops them."""
        if not drop_finished:
            if parents is not None:
                state = gather_state(state, None, parents)
            return beams, state, outputs
        outputs = _scatter_finished(outputs, beams.examples, beams.done, best(beams))
        beams, state = _drop(beams.done, beams, state, gather_state, parents)
        return beams, state, outputs

    def cond(index: tf.Tensor, beams: _Beams, state: Any, outputs: Any) -> tf.Tensor:
        if drop_finished:
            return tf.size(beams.examples) > 0
        return tf.logical_not(tf.reduce_all(beams.done))

    def body(index: tf.Tensor, beams: _Beams, state: Any, outputs: Any) -> Any:
        size = tf.shape(beams.limits)[0]
        log_probs, state = step_fn(tf.reshape(beams.alive_last, [-1]), state, index)
        log_probs = _mask_padding(tf.cast(log_probs, tf.float32))
        vocabulary = tf.shape(log_probs)[-1]
        # (size, beam * vocabulary): log P of every one-token extension.
        candidates = tf.reshape(
            beams.alive_log_probs[:, :, None]
            + tf.reshape(log_probs, [size, beam, vocabulary]),
            [size, beam * vocabulary],
        )
        top_log_probs, top_indices = tf.math.top_k(candidates, k=2 * beam)
        parents = top_indices // vocabulary
        tokens = top_indices % vocabulary
        # (size, 2 * beam, max_length)
        candidate_ids = _write(
            tf.gather(beams.alive_ids, parents, batch_dims=1), index, tokens
        )
        is_end = tf.equal(tokens, end)

        # Live hypotheses: the best `beam` candidates not ending in END.
        alive_log_probs, picked = tf.math.top_k(
            tf.where(is_end, neg_inf, top_log_probs), k=beam
        )
        alive_ids = tf.gather(candidate_ids, picked, batch_dims=1)
        alive_last = tf.gather(tokens, picked, batch_dims=1)
        new_parents = tf.gather(parents, picked, batch_dims=1)

        # Finished hypotheses: merge the new ones with those kept so far.
        new_scores = tf.where(
            is_end & candidate_in_beam,
            top_log_probs / length_penalty(index + 1, length_penalty_alpha),
            neg_inf,
        )
        merged_scores = tf.concat([beams.finished_scores, new_scores], axis=1)
        finished_scores, picked = tf.math.top_k(merged_scores, k=beam)
        merged_ids = tf.concat([beams.finished_ids, candidate_ids], axis=1)
        finished_ids = tf.gather(merged_ids, picked, batch_dims=1)
        merged_lengths = tf.concat(
            [beams.finished_lengths, tf.fill([size, 2 * beam], index + 1)], axis=1
        )
        finished_lengths = tf.gather(merged_lengths, picked, batch_dims=1)

        # Examples already done keep their hypotheses.
        def keep(old: tf.Tensor, new: tf.Tensor) -> tf.Tensor:
            frozen = tf.reshape(beams.done, [-1] + [1] * (len(new.shape) - 1))
            return tf.where(frozen, old, new)

        beams = beams._replace(
            alive_ids=keep(beams.alive_ids, alive_ids),
            alive_log_probs=keep(beams.alive_log_probs, alive_log_probs),
            alive_last=keep(beams.alive_last, alive_last),
            finished_ids=keep(beams.finished_ids, finished_ids),
            finished_scores=keep(beams.finished_scores, finished_scores),
            finished_lengths=keep(beams.finished_lengths, finished_lengths),
        )
        # Early stopping (§6.1: "terminate early when possible"): no live
        # hypothesis, nor any extension of one, can beat the best finished.
        best_possible = beams.alive_log_probs[:, 0] / beams.max_penalty
        cannot_improve = beams.finished_scores[:, 0] > best_possible
        beams = beams._replace(
            done=beams.done | cannot_improve | (index + 1 >= beams.limits)
        )
        # Reorder the state (e.g. the self-attention caches) by parent.
        beams, state, outputs = finish(beams, new_parents, state, outputs)
        return index + 1, beams, state, outputs

    beams = _Beams(
        examples=tf.range(batch),
        limits=limits,
        max_penalty=length_penalty(limits, length_penalty_alpha),
        alive_ids=tf.zeros((batch, beam, max_length), tf.int32),
        # Only the first live hypothesis exists at the start.
        alive_log_probs=tf.tile(
            tf.constant([[0.0] + [-np.inf] * (beam - 1)], tf.float32), [batch, 1]
        ),
        alive_last=tf.fill((batch, beam), tf.constant(start_id, tf.int32)),
        finished_ids=tf.zeros((batch, beam, max_length), tf.int32),
        finished_scores=tf.fill((batch, beam), neg_inf),
        finished_lengths=tf.zeros((batch, beam), tf.int32),
        done=limits <= 0,
    )
    outputs = (
        tf.zeros((batch, max_length), tf.int32),
        tf.zeros((batch,), tf.float32),
        tf.zeros((batch,), tf.int32),
    )
    # Examples without any token to generate are done before the loop (their
    # hypotheses are all alike: nothing to reorder).
    identity = tf.tile(tf.range(beam)[None], [batch, 1])
    beams, state, outputs = finish(
        beams, identity if drop_finished else None, state, outputs
    )
    _, beams, _, outputs = tf.while_loop(
        cond,
        body,
        (tf.constant(0, tf.int32), beams, state, outputs),
        shape_invariants=_shape_invariants(
            beams, state, outputs, drop_finished, state_shape_invariants
        ),
        maximum_iterations=max_length,
    )
    if not drop_finished:
        return best(beams)
    # Examples still running when `max_length` stopped the loop.
    running = tf.ones_like(beams.done)
    return _scatter_finished(outputs, beams.examples, running, best(beams))


# ------------------------------------------------------------- model decoder
class Decoder:
    """Compiled greedy, beam-search and sampling decoders for one model.

    Runs the model through its `TransformerStack`: the encoder once, then one
    `decode_beam_step` per output token. Holds one `tf.function` per search,
    traced again only for new static arguments (and once more to relax the
    input shapes). In a graph the output length is a tensor, so every length
    shares one trace; with XLA it is static, rounded up to a multiple of 16
    so that nearby source lengths share a compilation. The module functions
    `greedy_decode`, `beam_search` and `sample_decode` use a `Decoder`
    cached per model.

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

        # XLA needs static shapes; a graph lets caches grow and finished
        # examples leave the batch.
        static = {"static_shapes": jit_compile}
        self._greedy_fn = compiled(partial(self.greedy_graph, **static), jit_compile)
        self._sample_fn = compiled(partial(self.sample_graph, **static), jit_compile)
        self._beam_fn = compiled(partial(self.beam_search_graph, **static), jit_compile)
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
        max_length: int | tf.Tensor,
        start_id: int = START_ID,
        end_id: int | None = END_ID,
        select_fn: Callable[[tf.Tensor, tf.Tensor], tf.Tensor] | None = None,
        static_shapes: bool = False,
    ) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """Greedy decoding with KV caches, as TensorFlow ops.

        What `greedy` runs in its `tf.function`, without its checks: call it
        inside your own `tf.function` (e.g. a SavedModel signature).

        Args:
            source_ids: int32 `(batch, source_length)`, 0 for padding.
            limits: int32 `(batch,)`: the maximum output length of each
                example, END included, at most `max_length` (§6.1: its real
                source tokens + `extra_length`); 0 gives an empty output.
            max_length: size of the outputs: a Python int, or with
                `static_shapes=False` also a scalar int32 tensor (one trace
                for every length).
            start_id: the first decoder input.
            end_id: the token that ends a sequence; `None` for none.
            select_fn: `(log_probs, index) -> token_ids` choosing the next
                tokens instead of the argmax (as in `run_greedy`; `sample_graph`
                passes a sampler).
            static_shapes: keep every shape static, as XLA needs
                (`jit_compile=True`): key/value caches of `max_length`
                positions written by index, finished examples computed until
                the whole batch has finished. By default (a TensorFlow graph)
                the caches grow by one position per step and an example leaves
                the batch when it finishes. Both give the same outputs.

        Returns:
            `(token_ids (batch, max_length), scores (batch,), lengths
            (batch,))`, as `run_greedy`.

        Reference: Vaswani et al. (2017), §6.1.
        """
        step, state, gather, invariants = self._cached_step(
            source_ids, max_length, 1, static_shapes
        )
        return run_greedy(
            step,
            state,
            limits,
            max_length=max_length,
            start_id=start_id,
            end_id=end_id,
            select_fn=select_fn,
            # A sample must not depend on which other examples are running.
            drop_finished=not static_shapes and select_fn is None,
            gather_state=gather,
            state_shape_invariants=invariants,
        )

    def sample_graph(
        self,
        source_ids: tf.Tensor,
        limits: tf.Tensor,
        *,
        max_length: int | tf.Tensor,
        temperature: float | tf.Tensor = 1.0,
        top_k: int | None = None,
        seed: int | tf.Tensor = 0,
        start_id: int = START_ID,
        end_id: int | None = END_ID,
        static_shapes: bool = False,
    ) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """Ancestral sampling with KV caches, as TensorFlow ops.

        Args:
            source_ids, limits, max_length, start_id, end_id, static_shapes:
                as for `greedy_graph` (every example stays in the batch until
                all have finished, so that a draw does not depend on which
                other examples are still running).
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
            static_shapes=static_shapes,
        )

    def beam_search_graph(
        self,
        source_ids: tf.Tensor,
        limits: tf.Tensor,
        *,
        max_length: int | tf.Tensor,
        beam_size: int = 4,
        length_penalty: float | tf.Tensor = 0.6,
        start_id: int = START_ID,
        end_id: int | None = END_ID,
        static_shapes: bool = False,
    ) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """Beam search with KV caches and the GNMT length penalty, as TensorFlow ops.

        The hypotheses of an example share its encoder-decoder keys and
        values, and self-attention caches with one slot per hypothesis and
        position that are never reordered: after each step only a small
        table of each hypothesis' ancestry moves (see
        `TransformerStack.decode_beam_step`).

        Args:
            source_ids, limits, max_length, start_id, end_id, static_shapes:
                as for `greedy_graph`.
            beam_size: hypotheses kept per example (static).
            length_penalty: `alpha` (§6.1: 0.6), a number or float32 scalar.

        Returns:
            `(token_ids (batch, max_length), scores (batch,), lengths
            (batch,))` of the best hypothesis of each example, as
            `run_beam_search`.

        Reference: Vaswani et al. (2017), §6.1; Wu et al. (2016), Eq. 14.
        """
        step, state, gather, invariants = self._cached_step(
            source_ids, max_length, beam_size, static_shapes
        )
        return run_beam_search(
            step,
            state,
            limits,
            max_length=max_length,
            beam_size=beam_size,
            length_penalty_alpha=length_penalty,
            start_id=start_id,
            end_id=end_id,
            drop_finished=not static_shapes,
            gather_state=gather,
            state_shape_invariants=invariants,
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
        if graph_fn is self._uncached_fn or not self.jit_compile:
            # Shapes may change in a graph: one trace serves every length.
            length = tf.constant(length, tf.int32)
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
        self,
        source_ids: tf.Tensor,
        max_length: int | tf.Tensor,
        beam_size: int,
        static_shapes: bool,
    ) -> tuple[StepFunction, dict[str, Any], GatherFunction, Any]:
        """Encodes once; returns a step function, its initial state, how to
        gather the state and its shape invariants.

        The state holds, per example: the decoder blocks' caches
        (`TransformerStack.init_cache(..., beam_size=beam_size)`: the
        encoder-decoder keys and values once, and one self-attention slot per
        hypothesis and position), the source padding mask, and `history`
        `(batch, beam, max_length)`: the slot that holds the keys and values
        of hypothesis `k` at position `t`. Reordering the hypotheses after a
        step gathers `history` only; dropping finished examples gathers
        every tensor of the state. Greedy decoding under static shapes (XLA)
        takes `_static_greedy_step` instead.
        """
        stack = self.stack
        beam = beam_size
        encoder_output = stack.encode(source_ids, training=False)
        if beam == 1 and static_shapes:
            return self._static_greedy_step(source_ids, encoder_output, max_length)
        grow = not static_shapes
        state = {
            "caches": stack.init_cache(
                encoder_output, 0 if grow else max_length, beam_size=beam
            ),
            "padding_mask": tf.not_equal(source_ids, PAD_ID),
            "history": tf.zeros((tf.shape(source_ids)[0], beam, max_length), tf.int32),
        }
        slots = tf.range(beam)

        def step(token_ids: tf.Tensor, state: Any, index: tf.Tensor) -> Any:
            size = tf.shape(state["history"])[0]
            # Hypothesis k writes its keys and values at slot k of `index`.
            history = _write(state["history"], index, tf.tile(slots[None], [size, 1]))
            length = index + 1 if grow else max_length
            # (size, beam, length, beam) -> (size, beam, length * beam): which
            # slot of each position belongs to each hypothesis' history.
            mask = tf.equal(history[:, :, :length, None], slots)
            if not grow:  # positions not decoded yet
                mask &= (tf.range(max_length) <= index)[:, None]
            mask = tf.reshape(mask, [size, beam, length * beam])
            logits, caches = stack.decode_beam_step(
                tf.reshape(token_ids, [size, beam]),
                state["caches"],
                index,
                state["padding_mask"],
                mask,
                append=grow,
            )
            log_probs = tf.nn.log_softmax(
                tf.reshape(tf.cast(logits, tf.float32), [size * beam, -1])
            )
            return log_probs, {**state, "caches": caches, "history": history}

        def gather(
            state: Any, examples: tf.Tensor | None, parents: tf.Tensor | None
        ) -> Any:
            if examples is not None:
                state = tf.nest.map_structure(lambda x: tf.gather(x, examples), state)
            if parents is None:
                return state
            history = tf.gather(state["history"], parents, batch_dims=1)
            return {**state, "history": history}

        invariants = None
        if grow:
            # Examples leave (first dimension) and the self-attention caches
            # grow (their third).
            invariants = tf.nest.map_structure(
                lambda x: tf.TensorShape([None, *x.shape[1:]]), state
            )
            for cache in invariants["caches"]:
                for key in ("self_keys", "self_values"):
                    shape = cache[key].as_list()
                    cache[key] = tf.TensorShape([None, shape[1], None, *shape[3:]])
        return step, state, gather, invariants

    def _static_greedy_step(
        self, source_ids: tf.Tensor, encoder_output: tf.Tensor, max_length: int
    ) -> tuple[StepFunction, Any, GatherFunction, Any]:
        """`_cached_step` for one hypothesis per example under static shapes.

        `TransformerStack.decode_step` on caches of `max_length` positions
        written by index: one hypothesis needs no table of slots, and the
        encoder-decoder keys and values stay constants of the loop rather
        than part of its state (under XLA a smaller loop state is a cheaper
        step). The state is the self-attention caches only.
        """
        stack = self.stack
        caches = stack.init_cache(encoder_output, max_length)
        padding_mask = tf.not_equal(source_ids, PAD_ID)
        constant = [{key: cache[key] for key in _STATIC_CACHE_KEYS} for cache in caches]

        def step(token_ids: tf.Tensor, state: Any, index: tf.Tensor) -> Any:
            full = [{**c, **s} for c, s in zip(constant, state, strict=True)]
            logits, full = stack.decode_step(
                token_ids[:, None], full, index, padding_mask
            )
            log_probs = tf.nn.log_softmax(tf.cast(logits[:, 0], tf.float32))
            return log_probs, [_changing_entries(cache) for cache in full]

        state = [_changing_entries(cache) for cache in caches]
        return step, state, _gather_rows(None), None

    def _uncached_graph(
        self,
        source_ids: tf.Tensor,
        limits: tf.Tensor,
        *,
        max_length: int | tf.Tensor,
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

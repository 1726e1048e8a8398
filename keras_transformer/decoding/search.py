"""The one search loop: a `tf.while_loop` over a step function and a strategy.

A *step function* `step_fn(token_ids, state, index) -> (log_probs, state)`
scores the next token of every row (one row per hypothesis); a *strategy*
(`keras_transformer.decoding.strategies`: greedy, beam search, sampling)
decides which tokens to keep. The loop knows neither the model nor the
strategy's arithmetic, so a table of fixed log-probabilities drives it in
the tests exactly as the model's cached step does.

Two ways to run, with the same outputs:

- static shapes (XLA, `drop_finished=False`): every example is computed
  until the whole batch has finished;
- `drop_finished=True` (a TensorFlow graph): an example leaves the batch as
  soon as it has finished; its result is written at its row of the outputs,
  and the following steps compute only the unfinished examples.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

import numpy as np
import tensorflow as tf

from keras_transformer.conventions import END_ID, PAD_ID, START_ID

StepFunction = Callable[[tf.Tensor, Any, tf.Tensor], tuple[tf.Tensor, Any]]
"""`(token_ids (rows,), state, index) -> (log_probs (rows, vocabulary), state)`."""
GatherFunction = Callable[[Any, "tf.Tensor | None", "tf.Tensor | None"], Any]
"""`(state, examples, parents) -> state`: keeps the examples `examples` (int32
`(kept,)`, or None for all) of the state and, in beam search, puts each new
hypothesis in the place of its parent (`parents`, int32 `(kept, beam)`)."""
Outputs = tuple[tf.Tensor, tf.Tensor, tf.Tensor]
"""`(token_ids (batch, max_length), scores (batch,), lengths (batch,))`; an
n-best strategy (`strategies.NBestBeamSearch`) returns its own tuple."""
Prefix = tuple[tf.Tensor, tf.Tensor]
"""`(token_ids (batch, prefix_length), lengths (batch,))`: the tokens every
output of an example starts with (`force_prefix`)."""


class Strategy(Protocol):
    """How a search picks tokens (see `strategies`).

    Its per-example state is a `NamedTuple` whose fields `examples` (the
    example's row in the whole batch), `limits` and `done` the loop reads;
    every field has one row per example.
    """

    #: Rows of the step function per example (hypotheses).
    beam_size: int
    #: Whether `update` reorders hypotheses (returns parents).
    reorders: bool
    #: Whether finished examples may leave the batch (a sample must not
    #: depend on which other examples are still running).
    may_drop_finished: bool

    def start(self, limits: tf.Tensor, max_length: Any, start_id: int) -> Any: ...

    def inputs(self, beams: Any) -> tf.Tensor: ...

    def update(
        self, beams: Any, log_probs: tf.Tensor, index: tf.Tensor, end: int
    ) -> tuple[Any, tf.Tensor | None]: ...

    def result(self, beams: Any) -> Outputs: ...


def write_at(buffer: tf.Tensor, index: tf.Tensor, values: tf.Tensor) -> tf.Tensor:
    """`buffer[..., index] = values` for a `(..., length)` buffer (XLA-friendly)."""
    at_index = tf.equal(tf.range(tf.shape(buffer)[-1]), index)
    return tf.where(at_index, values[..., None], buffer)


def _chunk_size(length: int, k: int) -> int | None:
    """A divisor of `length` near 64 leaving at least `k` chunks, or None."""
    for size in (64, 50, 80, 40, 100, 32, 125, 128):
        if length % size == 0 and length // size >= k:
            return size
    return None


def top_k(values: tf.Tensor, k: int | tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """`tf.math.top_k(values, k)` over the last axis of a `(rows, n)`
    tensor: the same values and indices, ties included (the lower index
    first), faster over a vocabulary of thousands (the TopK time of
    ``benchmarks/serve_profile.py``).

    The row is cut into chunks of about 64 values. An entry of the top `k`
    lies in one of the `k` chunks with the largest maxima (ties: the lower
    chunk first), since each chunk ranked before its own holds a value
    ranked before it; so the top `k` of those chunks, taken in the order of
    their indices, is the row's. Without a static length with a divisor
    near 64, `tf.math.top_k` itself.
    """
    length = values.shape[-1]
    size = None if length is None or length < 1024 else _chunk_size(length, k)
    if size is None or values.shape.rank != 2:
        return tf.math.top_k(values, k=k)
    rows = tf.shape(values)[0]
    # (rows, chunks, size)
    chunks = tf.reshape(values, [rows, length // size, size])
    _, best = tf.math.top_k(tf.reduce_max(chunks, axis=-1), k=k)
    best = tf.sort(best, axis=-1)  # index order: ties as in the whole row
    candidates = tf.reshape(tf.gather(chunks, best, batch_dims=1), [rows, k * size])
    top_values, positions = tf.math.top_k(candidates, k=k)
    chunk = tf.gather(best, positions // size, batch_dims=1)
    return top_values, chunk * size + positions % size


def mask_padding(log_probs: tf.Tensor, pad_id: int = PAD_ID) -> tf.Tensor:
    """Makes the padding id impossible: it marks the end of an output."""
    vocabulary = tf.shape(log_probs)[-1]
    is_padding = tf.equal(tf.range(vocabulary), pad_id)
    return tf.where(is_padding, tf.constant(-np.inf, log_probs.dtype), log_probs)


def gather_rows(beam_size: int) -> GatherFunction:
    """The default `gather_state`: every state tensor has `beam_size` rows per
    example (row `b * beam_size + k` is hypothesis `k` of example `b`)."""

    def gather(
        state: Any, examples: tf.Tensor | None, parents: tf.Tensor | None
    ) -> Any:
        if parents is None:  # one row per example
            rows = examples
        else:
            if examples is None:
                examples = tf.range(tf.shape(parents)[0])
            # (examples, beam) -> (examples * beam,)
            rows = tf.reshape(examples[:, None] * beam_size + parents, [-1])
        return tf.nest.map_structure(lambda x: tf.gather(x, rows), state)

    return gather


def force_prefix(log_probs: tf.Tensor, prefix: Prefix, index: tf.Tensor) -> tf.Tensor:
    """Rows still inside their forced prefix get its token, log-probability 0.

    `prefix` is `(token_ids (rows, prefix_length), lengths (rows,))`: row `r`
    must emit `token_ids[r, index]` while `index < lengths[r]`. Its
    log-probabilities become 0 at that token and `-inf` elsewhere, so every
    strategy keeps it (sampling at any temperature too) and a forced token
    adds nothing to the score (it is given, not chosen).
    """
    prefix_ids, prefix_lengths = prefix
    last = tf.maximum(tf.shape(prefix_ids)[1] - 1, 0)
    # (rows,): the token each row must emit at `index` (if still forced).
    token = tf.gather(prefix_ids, tf.minimum(index, last), axis=1)
    vocabulary = tf.range(tf.shape(log_probs)[-1])
    one_hot = tf.where(
        tf.equal(vocabulary[None], token[:, None]),
        tf.constant(0.0, log_probs.dtype),
        tf.constant(-np.inf, log_probs.dtype),
    )
    forced = index < prefix_lengths
    return tf.where(forced[:, None], one_hot, log_probs)


def _with_prefix(
    search: tuple[StepFunction, Any, GatherFunction, Any],
    prefix: Prefix | None,
    beam_size: int,
) -> tuple[StepFunction, Any, GatherFunction, Any]:
    """The step function, state, gather and invariants of a search whose
    outputs start with a forced prefix per example: the prefix travels in
    the state (`(state, prefix_rows)`), one row per hypothesis, so that it
    follows examples that leave the batch; the loop's body forces it.
    `search` is `(step_fn, state, gather_state, state_shape_invariants)`,
    returned as it is without a prefix."""
    if prefix is None:
        return search
    step_fn, state, gather_state, invariants = search
    prefix_ids, prefix_lengths = prefix
    # (batch * beam, ...): one row per hypothesis, like the state.
    rows = (
        tf.repeat(tf.cast(prefix_ids, tf.int32), beam_size, axis=0),
        tf.repeat(tf.cast(prefix_lengths, tf.int32), beam_size, axis=0),
    )
    gather_prefix = gather_rows(beam_size)

    def step(token_ids: tf.Tensor, state: Any, index: tf.Tensor) -> Any:
        inner, prefix_rows = state
        log_probs, inner = step_fn(token_ids, inner, index)
        return log_probs, (inner, prefix_rows)

    def gather(state: Any, examples: Any, parents: Any) -> Any:
        inner, prefix_rows = state
        return (
            gather_state(inner, examples, parents),
            gather_prefix(prefix_rows, examples, parents),
        )

    if invariants is not None:
        invariants = (invariants, _leading_dimension_free(rows))
    return step, (state, rows), gather, invariants


def _allowed(
    log_probs: tf.Tensor, pad_id: int | None, prefix: Prefix | None, index: tf.Tensor
) -> tf.Tensor:
    """float32 log-probabilities of a step, the padding id made impossible
    (unless `pad_id` is None) and the rows inside their prefix forced."""
    log_probs = tf.cast(log_probs, tf.float32)
    if pad_id is not None:
        log_probs = mask_padding(log_probs, pad_id)
    if prefix is not None:
        log_probs = force_prefix(log_probs, prefix, index)
    return log_probs


def _running(drop_finished: bool) -> Callable[..., tf.Tensor]:
    """The loop's condition: an example is still in the batch (`drop_finished`)
    or not every example is done."""

    def cond(index: tf.Tensor, beams: Any, state: Any, outputs: Outputs) -> tf.Tensor:
        if drop_finished:
            return tf.size(beams.examples) > 0
        return tf.logical_not(tf.reduce_all(beams.done))

    return cond


def _leading_dimension_free(structure: Any) -> Any:
    """Shape invariants with an unknown first dimension (examples leave)."""
    return tf.nest.map_structure(
        lambda x: tf.TensorShape([None, *x.shape[1:]]), structure
    )


def _shape_invariants(
    beams: Any, state: Any, outputs: Any, drop_finished: bool, state_invariants: Any
) -> Any:
    """`tf.while_loop` shape invariants of `(index, beams, state, outputs)`,
    or None when every shape stays as it is."""
    if not drop_finished and state_invariants is None:
        return None

    def shapes(structure: Any) -> Any:
        return tf.nest.map_structure(lambda x: x.shape, structure)

    if state_invariants is None:
        state_invariants = _leading_dimension_free(state)
    return (
        tf.TensorShape([]),
        _leading_dimension_free(beams) if drop_finished else shapes(beams),
        state_invariants,
        shapes(outputs),
    )


def _drop(
    beams: NamedTuple, state: Any, gather_state: GatherFunction, parents: Any
) -> tuple[Any, Any]:
    """Removes the finished examples from the batch, or only reorders.

    `state` goes through `gather_state` with the kept examples (and their
    hypotheses' parents), or with `examples=None` when no example finished
    (then only beam search reorders anything).
    """

    def keep_all() -> tuple[Any, Any]:
        if parents is None:
            return beams, state
        return beams, gather_state(state, None, parents)

    def keep_unfinished() -> tuple[Any, Any]:
        kept = tf.cast(tf.reshape(tf.where(tf.logical_not(beams.done)), [-1]), tf.int32)
        kept_parents = None if parents is None else tf.gather(parents, kept)
        return (
            tf.nest.map_structure(lambda x: tf.gather(x, kept), beams),
            gather_state(state, kept, kept_parents),
        )

    return tf.cond(tf.reduce_any(beams.done), keep_unfinished, keep_all)


def _scatter(
    outputs: Outputs, examples: tf.Tensor, done: tf.Tensor, values: Outputs
) -> Outputs:
    """`outputs[i][examples[done]] = values[i][done]`: finished examples'
    results, written at their place in the whole batch."""
    finished = tf.where(done)  # (finished, 1)
    rows = tf.gather_nd(examples, finished)[:, None]
    return tuple(
        tf.tensor_scatter_nd_update(output, rows, tf.gather_nd(value, finished))
        for output, value in zip(outputs, values, strict=True)
    )


def _finish(
    strategy: Strategy,
    gather_state: GatherFunction,
    drop_finished: bool,
    beams: Any,
    parents: tf.Tensor | None,
    state: Any,
    outputs: Outputs,
) -> tuple[Any, Any, Outputs]:
    """After a step: reorders the state by parent; with `drop_finished`,
    also writes the finished examples to `outputs` and drops them."""
    if not drop_finished:
        if parents is not None:
            state = gather_state(state, None, parents)
        return beams, state, outputs
    outputs = _scatter(outputs, beams.examples, beams.done, strategy.result(beams))
    beams, state = _drop(beams, state, gather_state, parents)
    return beams, state, outputs


def _start(
    strategy: Strategy,
    finish: Callable[..., tuple[Any, Any, Outputs]],
    limits: tf.Tensor,
    state: Any,
    max_length: int | tf.Tensor,
    start_id: int,
    drop_finished: bool,
) -> tuple[Any, Any, Outputs]:
    """The loop's first values: the strategy's start, empty outputs (zeros
    shaped like the strategy's `result`: `(token_ids, scores, lengths)`, or
    an n-best list's), and the examples without any token to generate
    already done (their hypotheses are all alike: nothing to reorder)."""
    batch = tf.shape(limits)[0]
    beams = strategy.start(limits, max_length, start_id)
    outputs = tuple(tf.zeros_like(x) for x in strategy.result(beams))
    parents = None
    if drop_finished and strategy.reorders:
        parents = tf.tile(tf.range(strategy.beam_size)[None], [batch, 1])
    return finish(beams, parents, state, outputs)


def run_search(
    strategy: Strategy,
    step_fn: StepFunction,
    state: Any,
    limits: Any,
    *,
    max_length: int | tf.Tensor,
    start_id: int = START_ID,
    end_id: int | None = END_ID,
    drop_finished: bool = False,
    gather_state: GatherFunction | None = None,
    state_shape_invariants: Any = None,
    pad_id: int | None = PAD_ID,
    prefix: Prefix | None = None,
) -> Outputs:
    """Runs `strategy` over `step_fn` as one `tf.while_loop`.

    Args:
        strategy: greedy, beam search, sampling (`strategies.get_strategy`).
        step_fn: a `StepFunction`; `index` is the position of `token_ids`.
        state: the initial state (any nest of tensors), by default `beam_size`
            rows per example, gathered by parent (`gather_state` replaces it).
        limits: int `(batch,)`: the maximum output length of each example.
        max_length: bound on `limits`, the size of the outputs: a Python int,
            or a scalar int32 tensor where shapes need not be static (not XLA).
        start_id: the first decoder input.
        end_id: the token that finishes a hypothesis; None for none.
        drop_finished: remove an example from the batch once it has
            finished (a TensorFlow graph, not XLA; the same outputs). Ignored
            for strategies that forbid it.
        gather_state: `(state, examples, parents) -> state` after a step that
            reorders hypotheses or drops examples (`GatherFunction`).
        state_shape_invariants: the `tf.while_loop` shape invariants of a
            state whose shapes change (default with `drop_finished`: the
            first dimension free).
        pad_id: the id never generated (it pads the outputs); None where
            every id is a value (image intensities).
        prefix: `(token_ids (batch, prefix_length), lengths (batch,))`: the
            tokens each example must start with (`force_prefix`).

    Returns:
        `strategy.result`: `(token_ids (batch, max_length), scores (batch,),
        lengths (batch,))`, 0 after END (or `NBestBeamSearch`'s lists).
    """
    limits = tf.cast(tf.convert_to_tensor(limits), tf.int32)
    end = -1 if end_id is None else end_id
    drop_finished = drop_finished and strategy.may_drop_finished
    gather_state = gather_state or gather_rows(strategy.beam_size)
    search = (step_fn, state, gather_state, state_shape_invariants)
    step_fn, state, gather_state, state_shape_invariants = _with_prefix(
        search, prefix, strategy.beam_size
    )

    finish = functools.partial(_finish, strategy, gather_state, drop_finished)

    def body(index: tf.Tensor, beams: Any, state: Any, outputs: Outputs) -> Any:
        log_probs, state = step_fn(strategy.inputs(beams), state, index)
        prefix_rows = None if prefix is None else state[1]
        log_probs = _allowed(log_probs, pad_id, prefix_rows, index)
        beams, parents = strategy.update(beams, log_probs, index, end)
        beams, state, outputs = finish(beams, parents, state, outputs)
        return index + 1, beams, state, outputs

    beams, state, outputs = _start(
        strategy, finish, limits, state, max_length, start_id, drop_finished
    )
    _, beams, _, outputs = tf.while_loop(
        _running(drop_finished),
        body,
        (tf.constant(0, tf.int32), beams, state, outputs),
        shape_invariants=_shape_invariants(
            beams, state, outputs, drop_finished, state_shape_invariants
        ),
        maximum_iterations=max_length,
    )
    if not drop_finished:
        return strategy.result(beams)
    # Examples still running when `max_length` stopped the loop.
    running = tf.ones_like(beams.done)
    return _scatter(outputs, beams.examples, running, strategy.result(beams))


__all__ = [
    "GatherFunction",
    "Outputs",
    "Prefix",
    "StepFunction",
    "Strategy",
    "force_prefix",
    "gather_rows",
    "mask_padding",
    "run_search",
    "top_k",
    "write_at",
]

"""Greedy decoding and ancestral sampling: one hypothesis per example.

Greedy decoding takes the most likely token at each step (§6.1 with a beam
of one); sampling draws it from ``softmax(log_probs / temperature)``,
optionally among the `top_k` most likely tokens only and within the nucleus
of mass `top_p` (Holtzman et al. 2020). Both score an output
by its summed log-probability under the model (temperature 1).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import tensorflow as tf

from keras_transformer.conventions import PAD_ID
from keras_transformer.decoding.search import Outputs, write_at

SelectFunction = Callable[[tf.Tensor, tf.Tensor], tf.Tensor]
"""`(log_probs (batch, vocabulary), index) -> token_ids (batch,)`."""


class Sequences(NamedTuple):
    """What a one-hypothesis search keeps per example between steps."""

    examples: tf.Tensor  # (n,) the example's row in the whole batch
    limits: tf.Tensor  # (n,) maximum output length
    token_ids: tf.Tensor  # (n, max_length)
    last: tf.Tensor  # (n,) the last token (the next decoder input)
    scores: tf.Tensor  # (n,) summed log-probabilities
    lengths: tf.Tensor  # (n,)
    done: tf.Tensor  # (n,)


class GreedySearch:
    """The most likely token at each step (or the one `select_fn` picks).

    Args:
        select_fn: `(log_probs, index) -> token_ids`; the argmax when None.

    Reference: Vaswani et al. (2017), §6.1.
    """

    beam_size = 1
    reorders = False
    may_drop_finished = True

    def __init__(self, select_fn: SelectFunction | None = None) -> None:
        self.select_fn = select_fn

    def start(self, limits: tf.Tensor, max_length: Any, start_id: int) -> Sequences:
        batch = tf.shape(limits)[0]
        return Sequences(
            examples=tf.range(batch),
            limits=limits,
            token_ids=tf.zeros((batch, max_length), tf.int32),
            last=tf.fill((batch,), tf.constant(start_id, tf.int32)),
            scores=tf.zeros((batch,), tf.float32),
            lengths=tf.zeros((batch,), tf.int32),
            done=limits <= 0,
        )

    def inputs(self, beams: Sequences) -> tf.Tensor:
        return beams.last

    def update(
        self, beams: Sequences, log_probs: tf.Tensor, index: tf.Tensor, end: int
    ) -> tuple[Sequences, None]:
        if self.select_fn is None:
            chosen = tf.argmax(log_probs, axis=-1, output_type=tf.int32)
        else:
            chosen = tf.cast(self.select_fn(log_probs, index), tf.int32)
        chosen_log_prob = tf.gather(log_probs, chosen[:, None], batch_dims=1)[:, 0]
        done = beams.done
        chosen = tf.where(done, PAD_ID, chosen)
        beams = beams._replace(
            token_ids=write_at(beams.token_ids, index, chosen),
            last=chosen,
            scores=beams.scores + tf.where(done, 0.0, chosen_log_prob),
            lengths=beams.lengths + tf.cast(tf.logical_not(done), tf.int32),
            done=done | tf.equal(chosen, end) | (index + 1 >= beams.limits),
        )
        return beams, None

    def result(self, beams: Sequences) -> Outputs:
        return beams.token_ids, beams.scores, beams.lengths


def nucleus_filter(logits: tf.Tensor, top_p: Any) -> tf.Tensor:
    """Top-p (nucleus) filtering of Holtzman et al. (2020), §3.1, Eq. 2-3.

    Keeps the smallest set of most likely tokens whose probability under
    ``softmax(logits)`` sums to at least `top_p` (the "nucleus"; always the
    most likely token), and sets the other logits to ``-inf``; sampling from
    the result draws from the renormalized nucleus. A token whose logit ties
    the least likely kept one is kept too.

    Args:
        logits: float `(rows, vocabulary)` (``-inf`` for impossible tokens).
        top_p: the nucleus mass, in (0, 1] (a number or float32 scalar).

    Returns:
        `logits` with the tokens outside the nucleus at ``-inf``.

    Example:
    >>> import numpy as np
    >>> logits = tf.math.log(tf.constant([[0.5, 0.3, 0.15, 0.05]]))
    >>> np.isfinite(nucleus_filter(logits, 0.7).numpy()).tolist()
    [[True, True, False, False]]
    """
    descending = tf.sort(logits, axis=-1, direction="DESCENDING")
    # (rows, vocabulary): the probability of the tokens more likely than each.
    before = tf.math.cumsum(tf.nn.softmax(descending), axis=-1, exclusive=True)
    in_nucleus = before < tf.cast(top_p, logits.dtype)
    least_kept = tf.reduce_min(
        tf.where(in_nucleus, descending, np.inf), axis=-1, keepdims=True
    )
    return tf.where(logits < least_kept, -np.inf, logits)


def sampler(
    seed: Any, temperature: Any, top_k: int | None, top_p: Any = None
) -> SelectFunction:
    """A `select_fn` drawing from ``softmax(log_probs / temperature)``, among
    the `top_k` most likely tokens and then the nucleus of mass `top_p`
    (`nucleus_filter`) where given; step `i` draws with the seed
    ``(seed, i)``, so a draw is reproducible."""

    def select(log_probs: tf.Tensor, index: tf.Tensor) -> tf.Tensor:
        logits = log_probs / temperature
        if top_k is not None:
            k = tf.minimum(top_k, tf.shape(logits)[-1])
            kth_best = tf.math.top_k(logits, k=k).values[:, -1:]
            logits = tf.where(logits < kth_best, -np.inf, logits)
        if top_p is not None:
            logits = nucleus_filter(logits, top_p)
        step_seed = tf.stack([seed, index])
        return tf.random.stateless_categorical(
            logits, 1, seed=step_seed, dtype=tf.int32
        )[:, 0]

    return select


class Sampling(GreedySearch):
    """Ancestral sampling from ``softmax(logits / temperature)``, optionally
    top-k and top-p (nucleus; Holtzman et al. 2020).

    Every example stays in the batch until all have finished, so that a draw
    does not depend on which other examples are still running.

    Args:
        seed: int32 scalar; step `i` draws with the seed ``(seed, i)``.
        temperature: float32 scalar > 0.
        top_k: sample only among the `top_k` most likely tokens (static).
        top_p: sample only from the nucleus of this mass (`nucleus_filter`);
            None: no nucleus.
    """

    may_drop_finished = False

    def __init__(
        self,
        seed: Any,
        temperature: Any,
        top_k: int | None = None,
        top_p: Any = None,
    ) -> None:
        super().__init__(sampler(seed, temperature, top_k, top_p))


__all__ = [
    "GreedySearch",
    "Sampling",
    "SelectFunction",
    "Sequences",
    "nucleus_filter",
    "sampler",
]

"""Beam search with the GNMT length penalty (§6.1; Wu et al. 2016, Eq. 14).

Each step extends the `beam_size` live hypotheses of every example by every
token and keeps the `2 * beam_size` best candidates (by log-probability).
Those ending in END and ranked within the first `beam_size` become finished
hypotheses, scored `log P / lp(length)` with
`lp(Y) = ((5 + |Y|) / 6) ** alpha`; the `beam_size` best finished ones are
kept. The `beam_size` best candidates not ending in END are the new live
hypotheses (there are always enough: at most `beam_size` candidates end in
END). An example stops early (§6.1: "terminate early when possible") when
its best finished score beats the best live log-probability divided by the
largest penalty it may still get, `lp(limit)`: log-probabilities only
decrease, so no live hypothesis can still beat it, and only the best
hypothesis is returned (``early_stop="exact"``, as tensor2tensor's search).
With ``early_stop="heuristic"`` the best live log-probability is divided by
the penalty of its current length instead (Hugging Face's
``early_stopping=False``): an example stops once no live hypothesis would
beat its best finished one if it ended now, fewer steps for a result that
may differ where a live hypothesis would have overtaken later. An example
without any finished hypothesis returns its best live one, scored with
`lp(limit)`.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import tensorflow as tf

from keras_transformer import validation
from keras_transformer.conventions import EARLY_STOPS
from keras_transformer.decoding.search import Outputs, top_k, write_at


def length_penalty(length: Any, alpha: Any) -> Any:
    """`lp(Y) = ((5 + |Y|) / 6) ** alpha` of Wu et al. (2016), Eq. 14.

    `alpha = 0` gives 1 (no normalisation); the paper (§6.1) uses 0.6.
    Works on Python numbers, numpy arrays and tensors.
    """
    if isinstance(length, (int, float, np.ndarray, np.number)):
        return ((5.0 + np.asarray(length, "float64")) / 6.0) ** alpha
    length = tf.cast(length, tf.float32)
    return tf.pow((5.0 + length) / 6.0, alpha)


class Beams(NamedTuple):
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


_NEG_INF = -np.inf


class BeamSearch:
    """Beam search of `beam_size` hypotheses, ranked with the length penalty.

    Args:
        beam_size: hypotheses kept per example (§6.1: 4).
        alpha: the length-penalty alpha (§6.1: 0.6), a number or float32
            scalar; 0 ranks by raw log-probability.
        early_stop: ``"exact"`` (§6.1's "terminate early when possible":
            once no live hypothesis can still win) or ``"heuristic"`` (once
            none would win if it ended now); see the module's docstring.

    Reference: Vaswani et al. (2017), §6.1; Wu et al. (2016), Eq. 14.
    """

    reorders = True
    may_drop_finished = True
    #: Finished hypotheses that must beat every live one before an example
    #: stops early (the n-best list's length; `NBestBeamSearch`).
    n_best = 1

    def __init__(self, beam_size: int, alpha: Any, early_stop: str = "exact") -> None:
        validation.check_choice("early_stop", early_stop, EARLY_STOPS)
        self.beam_size = beam_size
        self.alpha = alpha
        self.early_stop = early_stop

    def stop_penalty(self, beams: Beams, index: tf.Tensor) -> tf.Tensor:
        """The penalty that divides the best live log-probability when an
        example may stop: `lp(limit)` (exact) or `lp(index + 1)`, the
        penalty of the live hypotheses' current length (heuristic)."""
        if self.early_stop == "exact":
            return beams.max_penalty
        return length_penalty(tf.cast(index + 1, tf.float32), self.alpha)

    def start(self, limits: tf.Tensor, max_length: Any, start_id: int) -> Beams:
        batch, beam = tf.shape(limits)[0], self.beam_size
        return Beams(
            examples=tf.range(batch),
            limits=limits,
            max_penalty=length_penalty(limits, self.alpha),
            alive_ids=tf.zeros((batch, beam, max_length), tf.int32),
            # Only the first live hypothesis exists at the start.
            alive_log_probs=tf.tile(
                tf.constant([[0.0] + [_NEG_INF] * (beam - 1)], tf.float32), [batch, 1]
            ),
            alive_last=tf.fill((batch, beam), tf.constant(start_id, tf.int32)),
            finished_ids=tf.zeros((batch, beam, max_length), tf.int32),
            finished_scores=tf.fill((batch, beam), tf.constant(_NEG_INF, tf.float32)),
            finished_lengths=tf.zeros((batch, beam), tf.int32),
            done=limits <= 0,
        )

    def inputs(self, beams: Beams) -> tf.Tensor:
        return tf.reshape(beams.alive_last, [-1])

    def update(
        self, beams: Beams, log_probs: tf.Tensor, index: tf.Tensor, end: int
    ) -> tuple[Beams, tf.Tensor]:
        beam = self.beam_size
        top_log_probs, parents, tokens = self._best_extensions(beams, log_probs)
        # (size, 2 * beam, max_length)
        candidate_ids = write_at(
            tf.gather(beams.alive_ids, parents, batch_dims=1), index, tokens
        )
        is_end = tf.equal(tokens, end)
        # Live hypotheses: the best `beam` candidates not ending in END.
        alive_log_probs, picked = tf.math.top_k(
            tf.where(is_end, _NEG_INF, top_log_probs), k=beam
        )
        new_parents = tf.gather(parents, picked, batch_dims=1)
        updated = beams._replace(
            alive_ids=tf.gather(candidate_ids, picked, batch_dims=1),
            alive_log_probs=alive_log_probs,
            alive_last=tf.gather(tokens, picked, batch_dims=1),
            **self._finished(beams, candidate_ids, top_log_probs, is_end, index),
        )
        # Examples already done keep their hypotheses.
        beams = Beams(
            *(
                self._keep(beams.done, *pair)
                for pair in zip(beams, updated, strict=True)
            )
        )
        # Early stopping (§6.1: "terminate early when possible"): no live
        # hypothesis, nor any extension of one, can beat the best finished
        # (the `n_best`-th best finished, for an n-best list); heuristic: no
        # live hypothesis would beat it if it ended now.
        best_possible = beams.alive_log_probs[:, 0] / self.stop_penalty(beams, index)
        cannot_improve = beams.finished_scores[:, self.n_best - 1] > best_possible
        done = beams.done | cannot_improve | (index + 1 >= beams.limits)
        return beams._replace(done=done), new_parents

    def _best_extensions(
        self, beams: Beams, log_probs: tf.Tensor
    ) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """The `2 * beam` most likely one-token extensions of each example's
        live hypotheses: `(log P, parent, token)`, each `(size, 2 * beam)`,
        best first.

        Each of them is among the `2 * beam` best extensions of its own
        hypothesis, so the top-k runs over each hypothesis' vocabulary first,
        then over the `beam * 2 * beam` survivors: the same candidates, the
        same order among equal ones (lower hypothesis, then lower token) and
        the same sums as one top-k over every extension, without adding the
        hypothesis' log P to the whole vocabulary.
        """
        size, beam = tf.shape(beams.limits)[0], self.beam_size
        vocabulary = log_probs.shape[-1]
        if vocabulary is None:  # known only when the step runs
            per_row = tf.minimum(2 * beam, tf.shape(log_probs)[-1])
        else:
            per_row = min(2 * beam, vocabulary)
        # (size * beam, per_row): each hypothesis' best tokens.
        row_log_probs, row_tokens = top_k(log_probs, per_row)
        # (size, beam * per_row), hypothesis-major like the vocabulary was.
        candidates = tf.reshape(
            beams.alive_log_probs[:, :, None]
            + tf.reshape(row_log_probs, [size, beam, per_row]),
            [size, beam * per_row],
        )
        top_log_probs, top_indices = tf.math.top_k(candidates, k=2 * beam)
        tokens = tf.gather(
            tf.reshape(row_tokens, [size, beam * per_row]), top_indices, batch_dims=1
        )
        return top_log_probs, top_indices // per_row, tokens

    def _finished(
        self,
        beams: Beams,
        candidate_ids: tf.Tensor,
        top_log_probs: tf.Tensor,
        is_end: tf.Tensor,
        index: tf.Tensor,
    ) -> dict[str, tf.Tensor]:
        """The new finished hypotheses merged with those kept so far."""
        size, beam = tf.shape(beams.limits)[0], self.beam_size
        in_beam = tf.range(2 * beam) < beam
        new_scores = tf.where(
            is_end & in_beam,
            top_log_probs / length_penalty(index + 1, self.alpha),
            _NEG_INF,
        )
        merged_scores = tf.concat([beams.finished_scores, new_scores], axis=1)
        finished_scores, picked = tf.math.top_k(merged_scores, k=beam)
        merged_ids = tf.concat([beams.finished_ids, candidate_ids], axis=1)
        merged_lengths = tf.concat(
            [beams.finished_lengths, tf.fill([size, 2 * beam], index + 1)], axis=1
        )
        return {
            "finished_ids": tf.gather(merged_ids, picked, batch_dims=1),
            "finished_scores": finished_scores,
            "finished_lengths": tf.gather(merged_lengths, picked, batch_dims=1),
        }

    @staticmethod
    def _keep(done: tf.Tensor, old: tf.Tensor, new: tf.Tensor) -> tf.Tensor:
        """`old` for the examples already done, `new` for the others."""
        if old is new:
            return old
        frozen = tf.reshape(done, [-1] + [1] * (len(new.shape) - 1))
        return tf.where(frozen, old, new)

    def result(self, beams: Beams) -> Outputs:
        """Each example's best finished hypothesis, or its best live one
        scored with `lp(limit)` when none finished."""
        has_finished = beams.finished_scores[:, 0] > _NEG_INF
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
                has_finished, beams.finished_lengths[:, 0], tf.maximum(beams.limits, 0)
            ),
        )


class NBestBeamSearch(BeamSearch):
    """Beam search that returns the `n_best` best hypotheses of each example.

    The same search as `BeamSearch`, except that an example stops early only
    once its `n_best`-th best finished hypothesis beats every live one (so
    the list is the beam's true top `n_best`). An example with fewer
    finished hypotheses fills its list with its best live ones, scored with
    `lp(limit)` as `BeamSearch.result` does; a slot without any hypothesis
    has score ``-inf``.

    Args:
        beam_size, alpha, early_stop: as for `BeamSearch`.
        n_best: hypotheses returned per example, 1 to `beam_size`.

    Returns (`result`): ``(token_ids (n, n_best, max_length), scores (n,
    n_best) log P / lp(length) best first, log_probs (n, n_best) log P,
    lengths (n, n_best))``; its first hypothesis is `BeamSearch`'s output.

    Reference: Wu et al. (2016), Eq. 14; Vaswani et al. (2017), §6.1.
    """

    def __init__(
        self, beam_size: int, alpha: Any, n_best: int, early_stop: str = "exact"
    ) -> None:
        super().__init__(beam_size, alpha, early_stop)
        if not 1 <= n_best <= beam_size:
            raise ValueError(
                f"n_best must be in [1, beam_size={beam_size}]. Received: "
                f"n_best={n_best}"
            )
        self.n_best = n_best

    def result(self, beams: Beams) -> tuple[tf.Tensor, ...]:
        """The finished hypotheses best first, then the best live ones."""
        beam = self.beam_size
        num_finished = tf.reduce_sum(
            tf.cast(beams.finished_scores > _NEG_INF, tf.int32), axis=1
        )
        slots = tf.range(self.n_best)[None]  # (1, n_best)
        # (n, n_best): index into [finished..., alive...] of each list entry.
        picked = tf.where(
            slots < num_finished[:, None], slots, beam + slots - num_finished[:, None]
        )
        alive_lengths = tf.tile(tf.maximum(beams.limits, 0)[:, None], [1, beam])
        alive_scores = beams.alive_log_probs / beams.max_penalty[:, None]

        def pick(finished: tf.Tensor, alive: tf.Tensor) -> tf.Tensor:
            return tf.gather(tf.concat([finished, alive], 1), picked, batch_dims=1)

        scores = pick(beams.finished_scores, alive_scores)
        lengths = pick(beams.finished_lengths, alive_lengths)
        log_probs = tf.where(
            scores > _NEG_INF, scores * length_penalty(lengths, self.alpha), _NEG_INF
        )
        token_ids = pick(beams.finished_ids, beams.alive_ids)
        return token_ids, scores, log_probs, lengths


__all__ = ["BeamSearch", "Beams", "NBestBeamSearch", "length_penalty"]

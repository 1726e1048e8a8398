"""Lexically constrained beam search: dynamic beam allocation (Post and Vilar, 2018).

Each example comes with target phrases (token ids) that must appear in its
output. Every hypothesis tracks, for each phrase not yet met, how many of
its tokens end the hypothesis (a KMP automaton: a mismatch falls back to
the longest suffix that still starts the phrase, so overlaps are exact).
Its *level* is the number of phrase tokens covered: the lengths of the met
phrases plus the progress of the others.

A step scores, per hypothesis, the `beam_size` best tokens that do not
advance a phrase and every token that does (Post and Vilar 2018, §3:
"top-k", "constraints"); the candidates are grouped into banks by level,
ranked by log-probability inside each bank, and the new beam takes the
first of every bank (highest level first), then the second of every bank,
and so on: the beam is shared equally among the banks, and what an empty
bank leaves goes to the others (§3.2, dynamic beam allocation). A
hypothesis may end (END) only once every phrase is met; finished
hypotheses are scored and stopped as in `BeamSearch` (the GNMT penalty,
Wu et al. 2016, Eq. 14). An example whose phrases cannot all be met (too
long for its output limit) returns the live hypothesis that meets the most
phrase tokens: `unmet_phrases` reports what is missing, nothing is dropped
silently.

Everything has fixed shapes per step: phrases are a padded
`(batch, phrases, phrase_length)` tensor (0 pads; a phrase of length 0 is
no constraint), and the search runs inside `search.run_search` in a graph.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import tensorflow as tf

from keras_transformer.conventions import END_ID, PAD_ID, START_ID
from keras_transformer.decoding.search import Outputs, write_at
from keras_transformer.decoding.strategies.beam import BeamSearch, length_penalty

_NEG_INF = -np.inf


class ConstrainedBeams(NamedTuple):
    """What constrained beam search keeps per example (one row each)."""

    examples: tf.Tensor  # (n,) the example's row in the whole batch
    limits: tf.Tensor  # (n,) maximum output length
    max_penalty: tf.Tensor  # (n,) lp(limit)
    alive_ids: tf.Tensor  # (n, beam, max_length)
    alive_log_probs: tf.Tensor  # (n, beam), bank order (not sorted by score)
    alive_last: tf.Tensor  # (n, beam)
    alive_progress: tf.Tensor  # (n, beam, phrases) tokens matched, unmet ones
    alive_met: tf.Tensor  # (n, beam, phrases) bool
    finished_ids: tf.Tensor  # (n, beam, max_length)
    finished_scores: tf.Tensor  # (n, beam) log P / lp(length), best first
    finished_lengths: tf.Tensor  # (n, beam)
    phrases: tf.Tensor  # (n, phrases, phrase_length) token ids, 0 pads
    phrase_lengths: tf.Tensor  # (n, phrases)
    overlaps: tf.Tensor  # (n, phrases, phrase_length + 1, phrase_length + 1)
    done: tf.Tensor  # (n,)


def phrase_overlaps(phrases: tf.Tensor) -> tf.Tensor:
    """The KMP table of each phrase: `[p, k]` is true where, after `p` matched
    tokens, the last `k - 1` of them are the phrase's first `k - 1` (so the
    token `phrase[k - 1]` leaves `k` matched); `1 <= k <= p + 1`.

    Args:
        phrases: int32 `(n, phrases, length)`.

    Returns:
        bool `(n, phrases, length + 1, length + 1)`.
    """
    length = tf.shape(phrases)[-1]
    matched = tf.range(length + 1)[:, None, None]  # p
    kept = tf.range(length + 1)[None, :, None]  # k
    offset = tf.range(length)[None, None, :]  # j < k - 1
    # (length + 1, length + 1, length): phrase[p - k + 1 + j] == phrase[j]?
    position = tf.clip_by_value(
        matched - kept + 1 + offset, 0, tf.maximum(length - 1, 0)
    )
    shifted = tf.gather(phrases, position, axis=2)  # (n, phrases, p, k, j)
    equal = tf.equal(shifted, phrases[:, :, None, None, :])
    agree = tf.reduce_all(equal | (offset >= kept - 1), axis=-1)
    possible = (kept[..., 0] >= 1) & (kept[..., 0] <= matched[..., 0] + 1)
    return agree & possible


class ConstrainedBeamSearch(BeamSearch):
    """Beam search whose outputs contain given phrases (dynamic beam allocation).

    Args:
        beam_size: hypotheses kept per example, shared among the banks.
        alpha: the length-penalty alpha (§6.1: 0.6).
        phrases: int32 `(batch, phrases, phrase_length)`: the token ids of
            each example's phrases, 0 after a phrase's end; a row of zeros is
            no phrase.
        early_stop: as for `BeamSearch`.

    Reference: Post and Vilar (2018), "Fast Lexically Constrained Decoding
    with Dynamic Beam Allocation", §3; Vaswani et al. (2017), §6.1.
    """

    def __init__(
        self, beam_size: int, alpha: Any, phrases: Any, early_stop: str = "exact"
    ) -> None:
        super().__init__(beam_size, alpha, early_stop)
        self.phrases = tf.cast(phrases, tf.int32)

    def start(
        self, limits: tf.Tensor, max_length: Any, start_id: int
    ) -> ConstrainedBeams:
        beams = super().start(limits, max_length, start_id)
        lengths = tf.reduce_sum(tf.cast(self.phrases != PAD_ID, tf.int32), axis=-1)
        # (batch, beam, phrases)
        met = tf.tile(tf.equal(lengths, 0)[:, None], [1, self.beam_size, 1])
        return ConstrainedBeams(
            **{k: v for k, v in beams._asdict().items() if k != "done"},
            alive_progress=tf.zeros_like(met, tf.int32),
            alive_met=met,
            phrases=self.phrases,
            phrase_lengths=lengths,
            overlaps=phrase_overlaps(self.phrases),
            done=beams.done,
        )

    def _advance(
        self, beams: ConstrainedBeams, vocabulary: tf.Tensor
    ) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """After each token: `(progress, met, level)`, the first two
        `(n, beam, vocabulary, phrases)`, the level `(n, beam, vocabulary)`."""
        n, beam = tf.shape(beams.limits)[0], self.beam_size
        count, length = tf.shape(beams.phrases)[1], tf.shape(beams.phrases)[2]
        tables = tf.broadcast_to(
            beams.overlaps[:, None], [n, beam, count, length + 1, length + 1]
        )
        # (n, beam, phrases, length): may phrase[k - 1] leave k matched?
        rows = tf.gather(tables, beams.alive_progress, axis=3, batch_dims=3)[..., 1:]
        valid = rows & (beams.phrases != PAD_ID)[:, None] & ~beams.alive_met[..., None]
        values = tf.where(valid, tf.range(1, length + 1), 0)
        tokens = tf.broadcast_to(beams.phrases[:, None], tf.shape(values))
        grid = tf.meshgrid(
            tf.range(n),
            tf.range(beam),
            tf.range(count),
            tf.range(length),
            indexing="ij",
        )
        indices = tf.stack([grid[0], grid[1], tokens, grid[2]], axis=-1)
        # (n, beam, vocabulary, phrases): the longest match a token leaves.
        progress = tf.tensor_scatter_nd_max(
            tf.zeros([n, beam, vocabulary, count], tf.int32), indices, values
        )
        lengths = beams.phrase_lengths[:, None, None]
        met = beams.alive_met[:, :, None] | tf.equal(progress, lengths)
        level = tf.reduce_sum(tf.where(met, lengths, progress), axis=-1)
        return tf.where(met, 0, progress), met, level

    def _candidates(
        self, beams: ConstrainedBeams, log_probs: tf.Tensor
    ) -> dict[str, tf.Tensor]:
        """Per hypothesis, the `beam_size` best tokens that advance no phrase
        and every token that advances one (Post and Vilar 2018, §3), flattened
        to `(n, candidates)` (progress and met: `(n, candidates, phrases)`)."""
        n, beam = tf.shape(beams.limits)[0], self.beam_size
        vocabulary = tf.shape(log_probs)[-1]
        log_probs = tf.reshape(log_probs, [n, beam, vocabulary])
        progress, met, level = self._advance(beams, vocabulary)
        covered = tf.where(beams.alive_met, beams.phrase_lengths[:, None], 0)
        advances = level > tf.reduce_sum(covered, axis=-1)[..., None]
        plain = tf.math.top_k(
            tf.where(advances, _NEG_INF, log_probs), k=tf.minimum(beam, vocabulary)
        )
        special = tf.math.top_k(
            tf.where(advances, log_probs, _NEG_INF),
            k=tf.minimum(tf.size(beams.phrases[0]), vocabulary),
        )
        tokens = tf.concat([plain.indices, special.indices], axis=-1)  # (n, beam, P)
        token_log_probs = tf.concat([plain.values, special.values], axis=-1)
        count = tf.shape(progress)[-1]
        return {
            "scores": tf.reshape(
                beams.alive_log_probs[:, :, None] + token_log_probs, [n, -1]
            ),
            "parents": tf.reshape(
                tf.broadcast_to(tf.range(beam)[None, :, None], tf.shape(tokens)),
                [n, -1],
            ),
            "levels": tf.reshape(tf.gather(level, tokens, batch_dims=2), [n, -1]),
            "progress": tf.reshape(
                tf.gather(progress, tokens, batch_dims=2), [n, -1, count]
            ),
            "met": tf.reshape(tf.gather(met, tokens, batch_dims=2), [n, -1, count]),
            "tokens": tf.reshape(tokens, [n, -1]),
        }

    def update(
        self, beams: ConstrainedBeams, log_probs: tf.Tensor, index: tf.Tensor, end: int
    ) -> tuple[ConstrainedBeams, tf.Tensor]:
        found = self._candidates(beams, log_probs)
        scores, tokens = found["scores"], found["tokens"]
        total = tf.reduce_sum(beams.phrase_lengths, axis=-1)[:, None]
        is_end = tf.equal(tokens, end)
        live = ~is_end & (scores > _NEG_INF)
        picked = self._allocate(
            scores, found["levels"], live, tf.size(beams.phrases[0])
        )

        def chosen(values: tf.Tensor) -> tf.Tensor:
            return tf.gather(values, picked, batch_dims=1)

        parents = chosen(found["parents"])
        updated = beams._replace(
            alive_ids=write_at(
                tf.gather(beams.alive_ids, parents, batch_dims=1),
                index,
                chosen(tokens),
            ),
            alive_log_probs=tf.where(chosen(live), chosen(scores), _NEG_INF),
            alive_last=chosen(tokens),
            alive_progress=chosen(found["progress"]),
            alive_met=chosen(found["met"]),
            **self._finished_constrained(
                beams,
                scores,
                found["parents"],
                tokens,
                is_end & tf.equal(found["levels"], total),
                index,
            ),
        )
        # Examples already done keep their hypotheses.
        beams = ConstrainedBeams(
            *(
                self._keep(beams.done, *pair)
                for pair in zip(beams, updated, strict=True)
            )
        )
        # Early stopping as in `BeamSearch`; the live hypotheses are in bank
        # order, so the best of them is their maximum.
        best_live = tf.reduce_max(beams.alive_log_probs, axis=1)
        penalty = self.stop_penalty(beams, index)
        cannot_improve = beams.finished_scores[:, 0] > best_live / penalty
        done = beams.done | cannot_improve | (index + 1 >= beams.limits)
        return beams._replace(done=done), parents

    def _finished_constrained(
        self,
        beams: ConstrainedBeams,
        scores: tf.Tensor,
        parents: tf.Tensor,
        tokens: tf.Tensor,
        complete: tf.Tensor,
        index: tf.Tensor,
    ) -> dict[str, tf.Tensor]:
        """The candidates ending in END with every phrase met (`complete`),
        scored `log P / lp(length)`, merged with the finished ones so far."""
        beam = self.beam_size
        new_scores = tf.where(
            complete, scores / length_penalty(index + 1, self.alpha), _NEG_INF
        )
        k = tf.minimum(beam, tf.shape(new_scores)[1])
        best = tf.math.top_k(new_scores, k=k)
        ids = write_at(
            tf.gather(
                beams.alive_ids,
                tf.gather(parents, best.indices, batch_dims=1),
                batch_dims=1,
            ),
            index,
            tf.gather(tokens, best.indices, batch_dims=1),
        )
        merged_scores = tf.concat([beams.finished_scores, best.values], axis=1)
        finished_scores, picked = tf.math.top_k(merged_scores, k=beam)
        merged_ids = tf.concat([beams.finished_ids, ids], axis=1)
        merged_lengths = tf.concat(
            [beams.finished_lengths, tf.fill(tf.shape(best.indices), index + 1)], axis=1
        )
        return {
            "finished_ids": tf.gather(merged_ids, picked, batch_dims=1),
            "finished_scores": finished_scores,
            "finished_lengths": tf.gather(merged_lengths, picked, batch_dims=1),
        }

    def result(self, beams: ConstrainedBeams) -> Outputs:
        """Each example's best finished hypothesis (every phrase met); where
        none finished, the live one that meets the most phrase tokens (then
        the first in bank order), scored with `lp(limit)`."""
        beam = self.beam_size
        has_finished = beams.finished_scores[:, 0] > _NEG_INF
        met_tokens = tf.reduce_sum(
            tf.where(beams.alive_met, beams.phrase_lengths[:, None], 0), axis=-1
        )
        live = beams.alive_log_probs > _NEG_INF
        key = tf.where(live, met_tokens * (beam + 1) + (beam - tf.range(beam)), -1)
        best = tf.argmax(key, axis=1, output_type=tf.int32)
        return (
            tf.where(
                has_finished[:, None],
                beams.finished_ids[:, 0],
                tf.gather(beams.alive_ids, best, batch_dims=1),
            ),
            tf.where(
                has_finished,
                beams.finished_scores[:, 0],
                tf.gather(beams.alive_log_probs, best, batch_dims=1)
                / beams.max_penalty,
            ),
            tf.where(
                has_finished, beams.finished_lengths[:, 0], tf.maximum(beams.limits, 0)
            ),
        )

    def _allocate(
        self, scores: tf.Tensor, levels: tf.Tensor, live: tf.Tensor, top: tf.Tensor
    ) -> tf.Tensor:
        """The `beam_size` candidates kept: round-robin over the banks of
        equal level, highest level first (dynamic beam allocation, §3.2).

        Returns:
            int32 `(n, beam)`: indices into the candidates.
        """
        # (n, m, m): does candidate j rank before candidate i in i's bank?
        same = tf.equal(levels[:, :, None], levels[:, None, :]) & live[:, None, :]
        count = tf.shape(scores)[1]
        earlier = tf.range(count)[None, :] < tf.range(count)[:, None]
        before = (scores[:, None, :] > scores[:, :, None]) | (
            tf.equal(scores[:, None, :], scores[:, :, None]) & earlier[None]
        )
        rank = tf.reduce_sum(tf.cast(same & before, tf.int32), axis=-1)
        order = rank * (top + 1) + (top - levels)
        order = tf.where(live, order, tf.int32.max)
        return tf.math.top_k(-order, k=self.beam_size).indices


def pad_phrases(phrases: Sequence[Sequence[Sequence[int]]]) -> np.ndarray:
    """Token ids of each example's phrases as one int32 `(batch, phrases,
    phrase_length)` array, 0 after a phrase and for missing phrases (at
    least one phrase of one token, all zeros where there are none)."""
    count = max([len(example) for example in phrases] + [1])
    length = max([len(p) for example in phrases for p in example] + [1])
    padded = np.zeros((len(phrases), count, length), "int32")
    for row, example in enumerate(phrases):
        for column, phrase in enumerate(example):
            padded[row, column, : len(phrase)] = phrase
    return padded


def check_phrase_ids(
    phrases: Sequence[Sequence[Sequence[int]]], vocabulary_size: int
) -> None:
    """One-line `ValueError` unless every phrase is a non-empty list of ids
    in `[0, vocabulary_size)` other than padding, START and END."""
    for row, example in enumerate(phrases):
        for phrase in example:
            ids = [int(t) for t in phrase]
            if not ids:
                raise ValueError(
                    f"Constraint phrase of example {row} is empty; give at least "
                    "one token per phrase (or no phrase)."
                )
            bad = [t for t in ids if t in (PAD_ID, START_ID, END_ID)]
            bad += [t for t in ids if not 0 <= t < vocabulary_size]
            if bad:
                raise ValueError(
                    f"Constraint phrase {ids} of example {row} holds id {bad[0]}: "
                    f"phrases must be ids in [0, {vocabulary_size}) other than "
                    f"padding {PAD_ID}, START {START_ID} and END {END_ID}."
                )


def unmet_phrases(
    token_ids: Any, lengths: Any, phrases: Sequence[Sequence[Sequence[int]]]
) -> list[list[int]]:
    """The indices of each example's phrases missing from its output.

    Args:
        token_ids: int `(batch, length)` outputs (`DecodeResult.token_ids`).
        lengths: int `(batch,)` output lengths, END included.
        phrases: per example, its phrases as lists of ids.

    Returns:
        Per example, the indices (from 0) of the phrases that are not a
        contiguous part of its output.

    Example:
    >>> unmet_phrases([[5, 6, 7, 3]], [4], [[[6, 7], [7, 5]]])
    [[1]]
    """
    unmet = []
    for row, example in enumerate(phrases):
        output = [int(t) for t in np.asarray(token_ids[row])[: int(lengths[row])]]
        unmet.append(
            [i for i, phrase in enumerate(example) if not _contains(output, phrase)]
        )
    return unmet


def _contains(output: list[int], phrase: Sequence[int]) -> bool:
    phrase = [int(t) for t in phrase]
    return any(
        output[i : i + len(phrase)] == phrase
        for i in range(len(output) - len(phrase) + 1)
    )


__all__ = [
    "ConstrainedBeamSearch",
    "ConstrainedBeams",
    "check_phrase_ids",
    "pad_phrases",
    "phrase_overlaps",
    "unmet_phrases",
]

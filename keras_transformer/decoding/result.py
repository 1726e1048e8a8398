"""`DecodeResult`: what every search returns."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from keras_transformer.conventions import END_ID


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
        unmet_constraints: with constraints (`Decoder.decode(...,
            constraints=...)`), per example the indices of its phrases its
            output does not contain; None without constraints.
    """

    token_ids: np.ndarray
    scores: np.ndarray
    lengths: np.ndarray
    unmet_constraints: list[list[int]] | None = None

    @classmethod
    def from_outputs(cls, token_ids: Any, scores: Any, lengths: Any) -> DecodeResult:
        """The result of a search's `(token_ids, scores, lengths)` tensors,
        cut to the longest output (at least one column)."""
        lengths = np.asarray(lengths, "int32")
        width = max(int(lengths.max(initial=0)), 1)
        return cls(
            token_ids=np.asarray(token_ids, "int32")[:, :width],
            scores=np.asarray(scores, "float32"),
            lengths=lengths,
        )

    def to_list(self, strip_end: bool = False, end_id: int = END_ID) -> list[list[int]]:
        """The outputs as lists of ids, without padding (and END if asked)."""
        outputs = []
        for row, length in zip(self.token_ids, self.lengths, strict=True):
            ids = [int(t) for t in row[: int(length)]]
            if strip_end and ids and ids[-1] == end_id:
                ids = ids[:-1]
            outputs.append(ids)
        return outputs


@dataclasses.dataclass
class NBestResult:
    """The n-best lists of a beam search (`Decoder.decode(n_best=...)`), best first.

    Attributes:
        token_ids: int32 `(batch, n_best, length)`: each hypothesis' tokens,
            END included, then 0.
        scores: float32 `(batch, n_best)`: `log P(Y | X) / lp(Y)` (Wu et al.
            2016, Eq. 14), what the beam ranks by; ``-inf`` for a slot
            without any hypothesis.
        log_probs: float32 `(batch, n_best)`: `log P(Y | X)`, the raw
            log-probability (tokens of a forced prefix count 0).
        lengths: int32 `(batch, n_best)`: the number of tokens, END included.
    """

    token_ids: np.ndarray
    scores: np.ndarray
    log_probs: np.ndarray
    lengths: np.ndarray

    @classmethod
    def from_outputs(cls, token_ids: Any, *rest: Any) -> NBestResult:
        """The result of `NBestBeamSearch`'s tensors, cut to the longest
        hypothesis (at least one column)."""
        scores, log_probs, lengths = (np.asarray(x) for x in rest)
        width = max(int(lengths.max(initial=0)), 1)
        return cls(
            token_ids=np.asarray(token_ids, "int32")[:, :, :width],
            scores=scores.astype("float32"),
            log_probs=log_probs.astype("float32"),
            lengths=lengths.astype("int32"),
        )

    def to_lists(
        self, strip_end: bool = False, end_id: int = END_ID
    ) -> list[list[list[int]]]:
        """Per example, its hypotheses as lists of ids (without padding, and
        without END if asked)."""
        return [
            DecodeResult(ids, scores, lengths).to_list(strip_end, end_id)
            for ids, scores, lengths in zip(
                self.token_ids, self.scores, self.lengths, strict=True
            )
        ]


@dataclasses.dataclass
class ScoreResult:
    """Forced decoding: the log-probability of given targets (`Decoder.score`).

    Attributes:
        token_log_probs: float32 `(batch, length)`: `log P(y_t | y_<t, X)` of
            each target token, END included, then 0.
        log_probs: float32 `(batch,)`: their sum, `log P(Y | X)`.
        lengths: int32 `(batch,)`: target tokens scored, END included.
    """

    token_log_probs: np.ndarray
    log_probs: np.ndarray
    lengths: np.ndarray

    def to_list(self) -> list[list[float]]:
        """Each example's per-token log-probabilities, without padding."""
        return [
            [float(x) for x in row[: int(length)]]
            for row, length in zip(self.token_log_probs, self.lengths, strict=True)
        ]


__all__ = ["DecodeResult", "NBestResult", "ScoreResult"]

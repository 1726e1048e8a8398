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


__all__ = ["DecodeResult"]

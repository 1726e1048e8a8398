"""Sources cut to a translator's input limit: one warning, one wording.

Every translator keeps a source's first ``max_input_length - 1`` subword
tokens and END (§6.1 decodes whole sentences; a limit keeps one long line
from taking the memory of a batch): `keras_transformer.translation.Translator`
(runs and SavedModel exports), `CTranslate2Translator` and
`LiteRTTranslator`. Each records the cut sources of its last call in
``cut_lines`` and warns with `SourceCutWarning` (`warn_cut_sources`
writes its text; `cut_export_sources` is the cut of both exports); the
command line reports them in its own words instead.

Pure Python: the translators of the CTranslate2 and LiteRT exports import
it without TensorFlow.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import TypeVar

from keras_transformer.validation import first_few

_Id = TypeVar("_Id")

__all__ = [
    "EXPORT_CUT_REMEDY",
    "LEARNED_POSITIONS_LIMIT",
    "SourceCutWarning",
    "cut_export_sources",
    "describe_lines",
    "export_cut_remedy",
    "warn_cut_sources",
]

#: What keeps more of a source that a CTranslate2 or LiteRT export cut: its
#: limit is the one it was exported with.
EXPORT_CUT_REMEDY = (
    "export the run again with a larger --max-input-length to keep more of them"
)
#: Why nothing keeps more of it when the limit is the model's own.
LEARNED_POSITIONS_LIMIT = "it is the model's number of learned source positions"


def export_cut_remedy(max_input_length: int, learned_positions: int | None) -> str:
    """What keeps more of a source that an export cut to `max_input_length`:
    nothing where that is the model's number of `learned_positions`."""
    if learned_positions is not None and max_input_length >= learned_positions:
        return LEARNED_POSITIONS_LIMIT
    return EXPORT_CUT_REMEDY


class SourceCutWarning(UserWarning):
    """Some sources were longer than a translator's input limit and were
    cut; its ``cut_lines`` says which (their indices in the last call)."""


def describe_lines(numbers: Sequence[int], limit: int = 10) -> str:
    """``"3, 17, 20"``, or the first `limit` numbers and ``", ..."``."""
    return first_few(numbers, limit)


def warn_cut_sources(
    cut: Sequence[int],
    total: int,
    cap: str,
    kept: int,
    where: str,
    remedy: str,
    stacklevel: int = 3,
) -> None:
    """A `SourceCutWarning`: `cut` (indices) of `total` sources were longer
    than `cap` (``"max_input_length=N subword ids"``) and keep their first
    `kept` tokens; `where` names the attribute that lists them
    (``"Translator.cut_lines"``), `remedy` what keeps more of them."""
    warnings.warn(
        f"{len(cut)} of {total} sources were longer than {cap} (END included) "
        f"and were cut to their first {kept} tokens (indices "
        f"{describe_lines(cut)}; all in {where}); {remedy}.",
        SourceCutWarning,
        stacklevel=stacklevel,
    )


def cut_export_sources(
    rows: Sequence[Sequence[_Id]],
    max_input_length: int,
    end: _Id,
    where: str,
    remedy: str = EXPORT_CUT_REMEDY,
) -> tuple[list[list[_Id]], tuple[int, ...]]:
    """An export's encoder inputs: each row's first ``max_input_length - 1``
    ids, then `end`; and the indices of the rows that were longer and cut,
    named in a `SourceCutWarning` (`where`: the attribute that lists them;
    `remedy`: what keeps more of them, `export_cut_remedy`)."""
    keep = max_input_length - 1
    cut = tuple(i for i, row in enumerate(rows) if len(row) > keep)
    if cut:
        cap = f"the export's max_input_length={max_input_length} subword ids"
        warn_cut_sources(cut, len(rows), cap, keep, where, remedy, stacklevel=4)
    return [[*row[:keep], end] for row in rows], cut

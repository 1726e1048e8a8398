"""Moved: the argument checks live in `keras_transformer.validation`.

This module re-exports them, with a `DeprecationWarning`, so that ``from
keras_transformer.layers.validation import check_positive_int`` keeps
working; import them from `keras_transformer.validation` (this module is
removed in 0.4).
"""

from __future__ import annotations

import warnings

from keras_transformer.validation import (
    check_bool,
    check_choice,
    check_int,
    check_number,
    check_positive_int,
    check_rate,
    check_string,
)

__all__ = [
    "check_bool",
    "check_choice",
    "check_int",
    "check_number",
    "check_positive_int",
    "check_rate",
    "check_string",
]

warnings.warn(
    "keras_transformer.layers.validation moved to keras_transformer.validation; "
    "the old module is removed in 0.4.",
    DeprecationWarning,
    stacklevel=2,
)

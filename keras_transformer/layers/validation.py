"""Argument checks: fail early, name the argument and the value.

The one home of the package's "must be a positive integer" checks: the
layers check their arguments with them, and the config dataclasses
(`TransformerConfig`, `OptimizerConfig`, the training `DataConfig` and
`TrainingConfig`) every field, under its dotted config key (e.g.
``model.optimizer.warmup_steps``). Each raises `ValueError` with one line:
the name, what it must be, and the value received.

A `bool` is never a number here (``True`` is not the integer 1), an integer
is a valid float (``learning_rate_scale=2``), and a float is never an
integer (``warmup_steps=400.0`` is refused). NaN and infinities are never
valid numbers. ``allow_none=True`` also accepts ``None`` (``null`` in a JSON
config), and the message says so.

Pure Python (standard library only).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

__all__ = [
    "check_bool",
    "check_choice",
    "check_int",
    "check_number",
    "check_positive_int",
    "check_rate",
    "check_string",
]


def _fail(name: str, what: str, value: Any, allow_none: bool) -> None:
    shown = repr(value)
    if len(shown) > 80:
        shown = f"{shown[:77]}..."
    raise ValueError(
        f"`{name}` must be {what}{' or null' if allow_none else ''}. "
        f"Received: {name}={shown}"
    )


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_int(
    name: str,
    value: Any,
    minimum: int | None = None,
    maximum: int | None = None,
    *,
    allow_none: bool = False,
) -> None:
    """Raises `ValueError` unless `value` is an integer in [minimum, maximum]."""
    if value is None and allow_none:
        return
    if (
        _is_int(value)
        and (minimum is None or value >= minimum)
        and (maximum is None or value <= maximum)
    ):
        return
    if minimum == 1 and maximum is None:
        what = "a positive integer"
    elif minimum == 0 and maximum is None:
        what = "a non-negative integer"
    elif minimum is None and maximum is None:
        what = "an integer"
    elif maximum is None:
        what = f"an integer >= {minimum}"
    elif minimum is None:
        what = f"an integer <= {maximum}"
    else:
        what = f"an integer from {minimum} to {maximum}"
    _fail(name, what, value, allow_none)


def check_positive_int(name: str, value: Any, *, allow_none: bool = False) -> None:
    """Raises `ValueError` unless `value` is a positive integer."""
    check_int(name, value, 1, allow_none=allow_none)


def check_number(
    name: str,
    value: Any,
    *,
    above: float | None = None,
    at_least: float | None = None,
    below: float | None = None,
    allow_none: bool = False,
) -> None:
    """Raises `ValueError` unless `value` is a finite number in the range.

    Args:
        name: the argument (or dotted config key) the message names.
        value: the value to check; an integer is a valid number, a `bool`
            and NaN or an infinity are not.
        above: the value must be greater than this.
        at_least: the value must be at least this.
        below: the value must be less than this.
        allow_none: whether ``None`` is accepted too.
    """
    if value is None and allow_none:
        return
    valid = (
        isinstance(value, numbers.Real)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and (above is None or value > above)
        and (at_least is None or value >= at_least)
        and (below is None or value < below)
    )
    if valid:
        return
    low = f"[{at_least:g}" if at_least is not None else None
    low = low or (f"({above:g}" if above is not None else None)
    if low is not None and below is not None:
        what = f"a number in {low}, {below:g})"
    elif above == 0:
        what = "a positive number"
    elif above is not None:
        what = f"a number > {above:g}"
    elif at_least is not None:
        what = f"a number >= {at_least:g}"
    elif below is not None:
        what = f"a number < {below:g}"
    else:
        what = "a finite number"
    _fail(name, what, value, allow_none)


def check_rate(name: str, value: Any, *, allow_none: bool = False) -> None:
    """Raises `ValueError` unless `value` is a rate (dropout, ...) in [0, 1)."""
    if value is None and allow_none:
        return
    try:
        check_number(name, value, at_least=0.0, below=1.0)
    except ValueError:
        _fail(name, "a rate in [0, 1)", value, allow_none)


def check_bool(name: str, value: Any) -> None:
    """Raises `ValueError` unless `value` is ``True`` or ``False``."""
    if not isinstance(value, bool):
        _fail(name, "true or false", value, False)


def check_string(name: str, value: Any, *, allow_none: bool = False) -> None:
    """Raises `ValueError` unless `value` is a non-empty string."""
    if value is None and allow_none:
        return
    if not isinstance(value, str) or not value:
        _fail(name, "a non-empty string", value, allow_none)


def check_choice(name: str, value: Any, choices: Sequence[Any]) -> None:
    """Raises `ValueError` unless `value` is one of `choices`."""
    if isinstance(value, bool) or not any(
        isinstance(value, type(choice)) and value == choice for choice in choices
    ):
        shown = ", ".join(map(repr, choices))
        _fail(name, f"one of {shown}", value, False)

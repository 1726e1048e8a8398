"""Argument checks shared by the layers: fail early, name the argument and value."""

from __future__ import annotations

from typing import Any


def check_positive_int(name: str, value: Any) -> None:
    """Raises `ValueError` unless `value` is a positive integer."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(
            f"`{name}` must be a positive integer. Received: {name}={value!r}"
        )


def check_rate(name: str, value: Any) -> None:
    """Raises `ValueError` unless `value` is a dropout rate in [0, 1)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not 0.0 <= value < 1.0
    ):
        raise ValueError(
            f"`{name}` must be a rate in [0, 1). Received: {name}={value!r}"
        )


def check_choice(name: str, value: Any, choices: tuple[Any, ...]) -> None:
    """Raises `ValueError` unless `value` is one of `choices`."""
    if value not in choices:
        raise ValueError(
            f"`{name}` must be one of {choices}. Received: {name}={value!r}"
        )

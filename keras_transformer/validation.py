"""Argument checks: fail early, name the argument and the value.

The one public home of the package's argument checks (and of its one
"must be a positive integer" message): the layers check their arguments
with them, the models (`TransformerConfig`, `ImageTransformerConfig`) and
the config dataclasses
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

import difflib
import math
import numbers
import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any

__all__ = [
    "check_bool",
    "check_choice",
    "check_fields",
    "check_grid",
    "check_int",
    "check_known_names",
    "check_lines",
    "check_number",
    "check_pair",
    "check_path",
    "check_positive_int",
    "check_rate",
    "check_sentence",
    "check_string",
    "count_of",
    "first_few",
    "with_article",
]


#: The one wording of the positive-integer check (`check_positive_int`).
_POSITIVE_INTEGER = "a positive integer"


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


def _is_integral(value: Any) -> bool:
    """A Python or NumPy integer, never a `bool` (NumPy's register as
    `numbers.Integral`)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


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
        what = _POSITIVE_INTEGER
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


def check_sentence(name: str, value: Any) -> None:
    """Raises `TypeError` unless `value` is a str (one sentence of text); the
    fix names what was passed: bytes to decode, or something not text."""
    if not isinstance(value, str):
        fix = (
            "Decode bytes to str first"
            if isinstance(value, bytes)
            else "Pass one str per sentence"
        )
        raise TypeError(f"`{name}` is a {type(value).__name__}, not a str. {fix}.")


def check_lines(name: str, lines: Any) -> list[str]:
    """`lines` as a list of sentences: `TypeError` (one line) for one string
    (each of its characters would be a sentence) or an item that is not a
    str (`check_sentence`)."""
    if isinstance(lines, (str, bytes)):
        raise TypeError(
            f"`{name}` must be a list of strings; wrap one string in a list."
        )
    lines = list(lines)
    for i, line in enumerate(lines):
        check_sentence(f"{name}[{i}]", line)
    return lines


def count_of(count: int, noun: str, plural: str | None = None) -> str:
    """``"1 line"``, ``"2 lines"``, ``"1,014 lines"``: a count in a message
    (`plural` where adding an ``s`` does not make it: ``prefixes``).

    >>> count_of(1, "line"), count_of(1014, "line"), count_of(2, "prefix", "prefixes")
    ('1 line', '1,014 lines', '2 prefixes')
    """
    return f"{count:,} " + (noun if count == 1 else plural or noun + "s")


def first_few(items: Sequence[Any], limit: int) -> str:
    """``"a, b, c"``: the items of a one-line message, or the first `limit`
    of them and ``", ..."``."""
    shown = ", ".join(str(item) for item in items[:limit])
    return shown + (", ..." if len(items) > limit else "")


def check_choice(name: str, value: Any, choices: Sequence[Any]) -> None:
    """Raises `ValueError` unless `value` is one of `choices`."""
    if isinstance(value, bool) or not any(
        isinstance(value, type(choice)) and value == choice for choice in choices
    ):
        shown = ", ".join(map(repr, choices))
        _fail(name, f"one of {shown}", value, False)


def check_fields(
    check: Callable[..., None],
    config: Any,
    names: Iterable[str],
    *,
    section: str = "",
    **options: Any,
) -> None:
    """`check` on each field `names` of `config`, named by its config key.

    ``check_fields(check_rate, self, ("dropout",), section="model")`` runs
    ``check_rate("model.dropout", self.dropout)``: the one way a config
    dataclass checks its fields, so that a message names the dotted key
    (``--set model.dropout=...``) to fix. `options` go to `check` (e.g.
    ``allow_none=True``); without a `section` the bare field name is used.
    """
    for name in names:
        key = f"{section}.{name}" if section else name
        check(key, getattr(config, name), **options)


def check_known_names(
    given: Iterable[str],
    known: Iterable[str],
    what: str,
    *,
    listing: str = "Known",
    hint: str | None = None,
) -> None:
    """Raises `ValueError` unless every name in `given` is one of `known`.

    The message names the unknown ones, the closest known names
    (`close_name_hint`, or the caller's `hint`), and lists the known ones,
    sorted: ``Unknown <what>: ['d_modle']. Did you mean 'd_model'?
    <listing>: ['d_ff', 'd_model', ...].``
    """
    known = sorted(known)
    unknown = sorted(set(given) - set(known))
    if unknown:
        hint = close_name_hint(unknown, known) if hint is None else hint
        raise ValueError(f"Unknown {what}: {unknown}.{hint} {listing}: {known}.")


def closest_name(name: str, known: Iterable[str]) -> str | None:
    """The known name closest to a misspelt `name` (`difflib`, similarity
    0.75 or more), or None where none is that close."""
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.75)
    return close[0] if close else None


def close_name_hint(unknown: Sequence[str], known: Iterable[str]) -> str:
    """`` Did you mean 'train_steps'?`` for misspelt names: each unknown
    one's `closest_name`, or ``""`` where none is that close."""
    known = list(known)
    pairs = [(name, close) for name in unknown if (close := closest_name(name, known))]
    if not pairs:
        return ""
    if len(unknown) == 1:
        return f" Did you mean {pairs[0][1]!r}?"
    return " Did you mean " + ", ".join(f"{m!r} for {n!r}" for n, m in pairs) + "?"


def with_article(noun: str) -> str:
    """``a classification``, ``an image``: a kind's name in a message."""
    return ("an " if noun[0] in "aeiou" else "a ") + noun


def check_path(name: str, value: Any) -> None:
    """Refuses a path argument that is no path (None, a number, a list) in
    one line that names it; Python's own message ("expected str, bytes or
    os.PathLike object") names no argument.

    >>> check_path("`workdir`", None)
    Traceback (most recent call last):
    ...
    TypeError: `workdir` must be a path (a str or pathlib.Path). Received: None
    """
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(
            f"{name} must be a path (a str or pathlib.Path). Received: {value!r}"
        )


def check_pair(name: str, value: Any, minimum: int) -> tuple[int, int]:
    """A pair of integers `>= minimum` (rows, columns), as a tuple of `int`.

    The block sizes of local 2D attention (Parmar et al., 2018, §3.2): the
    query block (``minimum=1``) and the memory flange (``minimum=0``).
    NumPy integers are accepted; a `bool` is not an integer.

    Raises:
        ValueError: unless `value` is a list or tuple of two such integers.
    """
    kind = "positive" if minimum > 0 else "non-negative"
    message = (
        f"`{name}` must be a pair of {kind} integers (rows, columns). "
        f"Received: {name}={value!r}"
    )
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise ValueError(message)
    for item in value:
        if not _is_integral(item) or item < minimum:
            raise ValueError(message)
    return int(value[0]), int(value[1])


def _largest_divisor(size: int, at_most: int) -> int:
    """The largest divisor of `size` that is `<= at_most`."""
    return max(d for d in range(1, min(size, at_most) + 1) if size % d == 0)


def check_grid(rows: Any, cols: Any, query_block: tuple[int, int]) -> None:
    """Raises `ValueError` unless the query blocks tile the `rows x cols` grid.

    Local 2D attention (Parmar et al., 2018, §3.2) cuts the grid of
    positions into non-overlapping query blocks: `rows` and `cols` must be
    static positive integers, multiples of `query_block`'s. The message
    suggests a `query_block` that tiles the grid.
    """
    for name, size in (("rows", rows), ("cols", cols)):
        if not _is_integral(size):
            raise ValueError(
                f"LocalAttention2D needs a static image size; `{name}` must be "
                f"{_POSITIVE_INTEGER}. Received: {name}={size!r}"
            )
        if size <= 0:
            raise ValueError(
                f"The image `{name}` must be positive. Received: {name}={size}"
            )
    h_q, w_q = query_block
    suggestion = (_largest_divisor(rows, h_q), _largest_divisor(cols, w_q))
    grid = f"an image of {rows} rows x {cols} columns of positions"
    if h_q > rows or w_q > cols:
        raise ValueError(
            f"`query_block` is larger than {grid}. Received: "
            f"query_block={query_block}. Choose query_block={suggestion}."
        )
    if rows % h_q or cols % w_q:
        padded = (-(-rows // h_q) * h_q, -(-cols // w_q) * w_q)
        raise ValueError(
            f"The query blocks must tile {grid}: the rows must be a multiple "
            f"of query_block[0] and the columns of query_block[1]. Received: "
            f"query_block={query_block}. Pad the image to {padded[0]} rows x "
            f"{padded[1]} columns or choose query_block={suggestion}."
        )

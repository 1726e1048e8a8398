"""Whether a graph being traced will be differentiated (`forward_only`).

Its own module, imported by `keras_transformer.backend` and by the
TensorFlow twins alike, so that neither imports the other for it.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

__all__ = ["forward_only", "forward_only_enabled"]

_forward_only: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "forward_only", default=False
)


@contextlib.contextmanager
def forward_only() -> Iterator[None]:
    """Traces the TensorFlow twins without their hand-written gradients.

    For graphs that nothing differentiates, such as an export's: each twin
    then computes its forward value alone, without the `IdentityN` that
    carries a `tf.custom_gradient` (a SavedModel saved without its gradient
    functions warns about every function holding one when it is loaded).
    The values are the same. Read when a function is traced.
    """
    token = _forward_only.set(True)
    try:
        yield
    finally:
        _forward_only.reset(token)


def forward_only_enabled() -> bool:
    """Whether a `forward_only()` block is open in this context."""
    return _forward_only.get()

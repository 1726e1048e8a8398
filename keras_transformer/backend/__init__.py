"""One dispatch point per operation that has a TensorFlow fast path.

The layers, the loss and the optimizer of the core call the functions of
this module, never TensorFlow and never `keras.backend.backend()`
themselves. Each function runs one of two implementations of the same
operation:

- the portable reference in `keras_transformer.backend.portable`, written
  with `keras.ops` only, which runs on every Keras backend; and
- its TensorFlow twin in `keras_transformer.backend.tensorflow` (`nn`,
  `losses`, `optimizers`): fused kernels and hand-written gradients that
  compute the same function faster (see `docs/performance.md`). These are
  the only modules of the core that import TensorFlow, and they are
  imported only when picked.

The twin runs when the Keras backend is TensorFlow, the fast paths are
switched on, and the operation's own preconditions hold (listed with each
function). `tests/backend/` holds every twin to its reference, values and
gradients.

| dispatch | paper | TensorFlow twin |
|---|---|---|
| `linear` | Eqs. 2, 4 | 2-D `MatMul` + `BiasAdd` (+ `Relu`), gradient by hand |
| `matmul_transposed` | §3.4 | one `MatMul` with `transpose_b` |
| `residual_add` | §3.1 | `AddN` |
| `layer_norm` | §3.1 | statistics once, gradient in closed form |
| `masked_softmax` | Eq. 1 | gradient in closed form |
| `dropout` | §5.4 | 16 random bits per element |
| `label_smoothed_nll` | §5.4 | one fused softmax, gradient by hand |
| `adam_update` | §5.3 | `ResourceApplyAdam` |
| `global_token_count` | §5.4 | `tf.distribute` all-reduce (always on TF) |

Switching the fast paths off (for debugging, or to check that a result does
not depend on them): set the environment variable
`KERAS_TRANSFORMER_FAST_PATHS=0`, or call `fast_paths(False)`, which also
works as a context manager:

>>> import keras_transformer as kt
>>> with kt.backend.fast_paths(False):
...     kt.backend.fast_paths_enabled()
False

`fast_paths(True)` / `fast_paths(False)` take precedence over the
environment variable; `fast_paths(None)` defers to it again. Both are read
when an operation runs, which inside a `tf.function` (as `model.fit` uses)
means when the function is traced: switch before compiling or fitting.

A graph that nothing differentiates (an export's) is traced under
`forward_only()`: the twins then compute their forward values without the
`IdentityN` ops that carry their hand-written gradients.

`known_values` reads a tensor's values where they are known (NumPy or
eager, not inside a traced function), for the layers' checks of their
inputs.

`global_token_count` is not a fast path but a semantic one: under
`tf.distribute` the loss divides by the token count of the global batch.
It therefore takes the TensorFlow branch whenever the backend is
TensorFlow, whatever the switch says.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from types import TracebackType
from typing import Any

import keras
import numpy as np

from keras_transformer.backend import portable
from keras_transformer.backend.portable import MASK_FILL_VALUE
from keras_transformer.backend.tracing import forward_only, forward_only_enabled

#: The environment variable that switches every fast path off when "0".
ENVIRONMENT_VARIABLE = "KERAS_TRANSFORMER_FAST_PATHS"
_OFF_VALUES = frozenset({"0", "false", "no", "off"})

# None: defer to the environment variable; True / False: set by fast_paths().
_switch: bool | None = None


def fast_paths_enabled() -> bool:
    """Whether the fast paths are switched on (they are by default).

    `fast_paths(True/False)` decides when it was called; otherwise the
    environment variable `KERAS_TRANSFORMER_FAST_PATHS` (`0`, `false`, `no`
    or `off` switch them off), read at every call.
    """
    if _switch is not None:
        return _switch
    return os.environ.get(ENVIRONMENT_VARIABLE, "1").strip().lower() not in _OFF_VALUES


class fast_paths:  # noqa: N801 (a function that is also a context manager)
    """Switches every fast path on or off; also a context manager.

    `fast_paths(False)` makes every dispatch function of
    `keras_transformer.backend` run its portable `keras.ops` reference;
    `fast_paths(True)` switches them on again, `fast_paths(None)` hands the
    choice back to the environment variable `KERAS_TRANSFORMER_FAST_PATHS`.
    Used in a `with` statement, the previous setting is restored on exit:

        with kt.backend.fast_paths(False):
            model.fit(...)  # traced with the portable operations

    Args:
        enabled: `True`, `False`, or `None` (the environment variable decides).
    """

    def __init__(self, enabled: bool | None) -> None:
        global _switch
        if enabled is not None and not isinstance(enabled, bool):
            raise ValueError(
                "`enabled` must be True, False or None (the environment "
                f"variable {ENVIRONMENT_VARIABLE} decides). "
                f"Received: enabled={enabled!r}"
            )
        self._previous = _switch
        _switch = enabled

    def __enter__(self) -> fast_paths:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        global _switch
        _switch = self._previous


def uses_tensorflow_fast_paths() -> bool:
    """Whether the TensorFlow twins run: TensorFlow backend, switch on."""
    return keras.backend.backend() == "tensorflow" and fast_paths_enabled()


# ----------------------------------------------------------------- linear maps
def linear(
    inputs: Any, kernel: Any, bias: Any | None = None, relu: bool = False
) -> Any:
    """`inputs @ kernel + bias` over the last axis, optionally followed by ReLU.

    Every linear map of the model: W^Q, W^K, W^V, W^O (Eq. 2) and both
    layers of the feed-forward network (Eq. 4). Positions are flattened to
    a `(tokens, d_in)` matrix.

    Args:
        inputs: `(..., d_in)`.
        kernel: `(d_in, d_out)`; cast to the dtype of `inputs` (a layer's
            compute dtype, so float32 variables serve mixed precision).
        bias: optional `(d_out,)`; cast likewise.
        relu: apply `max(0, .)` to the result (the inner layer of Eq. 4).

    Returns:
        `(..., d_out)`.
    """
    if uses_tensorflow_fast_paths():
        from keras_transformer.backend.tensorflow import nn

        return nn.linear(inputs, kernel, bias, relu)
    return portable.linear(inputs, kernel, bias, relu)


def matmul_transposed(hidden: Any, embeddings: Any) -> Any:
    """`hidden @ embeddings^T` over the last axis of `hidden` (§3.4).

    The pre-softmax linear transformation with the shared embedding matrix.
    """
    if uses_tensorflow_fast_paths():
        from keras_transformer.backend.tensorflow import nn

        return nn.matmul_transposed(hidden, embeddings)
    return portable.matmul_transposed(hidden, embeddings)


# ------------------------------------------------------- residual and norm
def residual_add(inputs: Any, sublayer_output: Any) -> Any:
    """`x + Sublayer(x)`, the residual connection of §3.1."""
    if uses_tensorflow_fast_paths():
        from keras_transformer.backend.tensorflow import nn

        return nn.residual_add(inputs, sublayer_output)
    return portable.residual_add(inputs, sublayer_output)


def layer_norm_takes_fast_path(
    rank: int,
    axis: int | Sequence[int],
    scale: bool,
    center: bool,
    rms_scaling: bool = False,
) -> bool:
    """Whether `layer_norm` runs the TensorFlow twin for these arguments:
    normalization over the last axis only, with both `scale` and `center`,
    without `rms_scaling`, on TensorFlow with the fast paths on."""
    axes = [axis] if isinstance(axis, int) else list(axis)
    return (
        scale
        and center
        and not rms_scaling
        and len(axes) == 1
        and axes[0] in (-1, rank - 1)
        and uses_tensorflow_fast_paths()
    )


def layer_norm(
    inputs: Any,
    gamma: Any | None,
    beta: Any | None,
    axis: int | Sequence[int] = -1,
    epsilon: float = 1e-3,
    rms_scaling: bool = False,
) -> Any:
    """Layer normalization (Ba et al., 2016) of `LayerNorm(x + Sublayer(x))`, §3.1.

    Statistics in float32 under every dtype policy. The TensorFlow twin runs
    for the last axis with both `gamma` and `beta` and without
    `rms_scaling` (it returns float32; the portable path returns the input's
    dtype, as `keras.ops.layer_normalization` does). The caller casts to its
    compute dtype.
    """
    if layer_norm_takes_fast_path(
        len(inputs.shape), axis, gamma is not None, beta is not None, rms_scaling
    ):
        from keras_transformer.backend.tensorflow import nn

        return nn.layer_norm(inputs, gamma, beta, float(epsilon))
    return portable.layer_norm(inputs, gamma, beta, axis, epsilon, rms_scaling)


# --------------------------------------------------------------- attention
def masked_softmax(logits: Any, mask: Any) -> Any:
    """Softmax over the last axis of float32 `logits`, zero where `mask` is false.

    Eq. 1 under a mask (`True` = may attend): masked logits are replaced by
    `MASK_FILL_VALUE` and the weights multiplied by the mask, so a row with
    no allowed key gets zeros rather than NaN.
    """
    if uses_tensorflow_fast_paths():
        from keras_transformer.backend.tensorflow import nn

        return nn.masked_softmax(logits, mask)
    return portable.masked_softmax(logits, mask)


# ----------------------------------------------------------------- dropout
def dropout(
    inputs: Any, rate: float, noise_shape: Any | None = None, seed: Any = None
) -> Any:
    """Dropout at `rate` (Srivastava et al., 2014; §5.4 "Residual Dropout").

    The TensorFlow twin (16 random bits per element, drop probability the
    rate rounded to a multiple of 2^-16) runs for `0 < rate < 1` without
    `noise_shape`; `seed` is then a `keras.random.SeedGenerator`, whose
    `next()` seeds the mask. Otherwise `keras.random.dropout` runs.
    """
    if (
        noise_shape is None
        and 0.0 < rate < 1.0
        and isinstance(seed, keras.random.SeedGenerator)
        and uses_tensorflow_fast_paths()
    ):
        from keras_transformer.backend.tensorflow import nn

        return nn.dropout(inputs, rate, seed.next())
    return portable.dropout(inputs, rate, noise_shape=noise_shape, seed=seed)


# -------------------------------------------------------------------- loss
def label_smoothed_nll(
    labels: Any, logits: Any, label_smoothing: float
) -> tuple[Any, Any]:
    """Per-token `(smoothed_loss, nll)` in float32 with label smoothing (§5.4).

    The smoothed target puts `1 - label_smoothing` on the true token and
    spreads `label_smoothing` over the vocabulary: `(1 - eps) * NLL + eps *
    mean_v(-log p_v)`.
    """
    if uses_tensorflow_fast_paths():
        from keras_transformer.backend.tensorflow import losses

        return losses.label_smoothed_nll(labels, logits, label_smoothing)
    return portable.label_smoothed_nll(labels, logits, label_smoothing)


def global_token_count(local_count: Any) -> Any:
    """The token count of the global batch (§5.4 loss normalisation).

    Under `tf.distribute` the sum over all replicas; otherwise, and on other
    backends, `local_count`. Not switched off by `fast_paths(False)`: it is
    part of the loss's definition, not a faster way to compute it.
    """
    if keras.backend.backend() == "tensorflow":
        from keras_transformer.backend.tensorflow import losses

        return losses.global_token_count(local_count)
    return portable.global_token_count(local_count)


# --------------------------------------------------------------- optimizer
def adam_update(
    optimizer: keras.optimizers.Adam, gradient: Any, variable: Any, learning_rate: Any
) -> None:
    """One Adam update (Kingma & Ba, 2015; §5.3) of `variable` and its slots.

    The TensorFlow twin (the fused `ResourceApplyAdam` kernel) runs unless
    `optimizer.amsgrad`; otherwise `keras.optimizers.Adam.update_step`.
    """
    if not optimizer.amsgrad and uses_tensorflow_fast_paths():
        from keras_transformer.backend.tensorflow import optimizers

        optimizers.adam_update(optimizer, gradient, variable, learning_rate)
        return
    portable.adam_update(optimizer, gradient, variable, learning_rate)


def known_values(x: Any) -> np.ndarray | None:
    """The values of `x` as NumPy where they are known (a NumPy array or an
    eager tensor), else `None` (a symbolic or traced tensor): for the
    layers' checks of their inputs, which can only read values outside a
    traced function."""
    if isinstance(x, (np.ndarray, np.generic)):
        return np.asarray(x)
    if keras.backend.backend() == "tensorflow" and not hasattr(x, "numpy"):
        return None  # symbolic: converting it would fail (after a warning)
    try:
        return np.asarray(keras.ops.convert_to_numpy(x))
    except Exception:  # traced by another backend: values unknown here
        return None


__all__ = [
    "ENVIRONMENT_VARIABLE",
    "MASK_FILL_VALUE",
    "adam_update",
    "dropout",
    "fast_paths",
    "fast_paths_enabled",
    "forward_only",
    "forward_only_enabled",
    "global_token_count",
    "known_values",
    "label_smoothed_nll",
    "layer_norm",
    "layer_norm_takes_fast_path",
    "linear",
    "masked_softmax",
    "matmul_transposed",
    "portable",
    "residual_add",
    "uses_tensorflow_fast_paths",
]

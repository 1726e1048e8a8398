"""Output distributions over 8-bit pixel intensities (Image Transformer §3.4).

Two heads turn the decoder's output into a distribution over intensities
`0 .. 255`, each with its negative log-likelihood in bits per dimension and
sampling with a temperature:

- `CategoricalPixelHead`: a 256-way softmax for every channel-wise position
  (one intensity per position, channels innermost in raster order), a
  linear map to 256 logits (Parmar et al., 2018, §3.4, "categorical").
- `DiscretizedLogisticMixtureHead`: one position per pixel, a mixture of
  `K` discretized logistics over its `C` channels, with the linear
  dependence of each channel's mean on the earlier channels of PixelCNN++
  (Salimans et al., 2017); `K (1 + 2C + C(C-1)/2)` parameters, 10 per
  component for RGB.

Everything is `keras.ops`; the log-likelihoods are computed in float32 with
softplus and log-sum-exp, so they stay finite for any parameters. The
functions below are what the heads' methods call; they take the heads'
outputs (`logits`, `params`) and integer `pixels`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import keras
import numpy as np
from keras import ops

from keras_transformer.backend import known_values, linear
from keras_transformer.validation import check_number, check_positive_int

__all__ = [
    "NUM_INTENSITIES",
    "CategoricalPixelHead",
    "DiscretizedLogisticMixtureHead",
    "categorical_bits_per_dim",
    "categorical_log_likelihood",
    "check_pixels",
    "dmol_bits_per_dim",
    "dmol_channel_log_probs",
    "dmol_components",
    "dmol_log_likelihood",
    "dmol_num_parameters",
    "discretized_logistic_log_probs",
    "sample_categorical",
    "sample_dmol",
]

#: 8-bit intensities: `0 .. 255`.
NUM_INTENSITIES = 256
#: PixelCNN++'s lower bound on the logistics' log-scales.
MIN_LOG_SCALE = -7.0
_LN2 = math.log(2.0)
_INTEGER_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32")
# The uniform noise behind Gumbel and logistic samples lies in [tiny, 1):
# both log(u) and log(1 - u) are finite.
_NOISE_MIN = float(np.finfo("float32").tiny)


# ------------------------------------------------------------------ checks
def check_pixels(name: str, pixels: Any) -> Any:
    """Raises `ValueError` unless `pixels` holds integer intensities 0..255.

    The dtype must be an integer one; the range is checked wherever the
    values are known (NumPy arrays and eager tensors; inside a compiled
    function the values cannot be inspected).

    Returns:
        `pixels` (NumPy inputs of Python lists become arrays).
    """
    if not hasattr(pixels, "dtype"):
        pixels = np.asarray(pixels)
    dtype = keras.backend.standardize_dtype(pixels.dtype)
    if dtype not in _INTEGER_DTYPES:
        raise ValueError(
            f"`{name}` must hold integer intensities in [0, 255]. Received: "
            f"{name}.dtype={dtype}. Quantize the image first, e.g. "
            "`np.clip(np.round(x * 255), 0, 255).astype('int32')` for values "
            "in [0, 1]."
        )
    values = known_values(pixels)
    if values is not None and values.size:
        low, high = int(values.min()), int(values.max())
        if low < 0 or high >= NUM_INTENSITIES:
            raise ValueError(
                f"`{name}` must hold intensities in [0, 255]. Received values "
                f"from {low} to {high} in {name}. Clip or rescale the image "
                "to 8 bits."
            )
    return pixels


def check_temperature(temperature: Any) -> float:
    """`temperature` as a float, or a `ValueError` naming it: a non-negative
    number (1: the model's distribution, 0: the most likely value)."""
    if (
        isinstance(temperature, bool)
        or not isinstance(temperature, (int, float))
        or not math.isfinite(temperature)
        or temperature < 0
    ):
        raise ValueError(
            "`temperature` must be a non-negative number (1: the model's "
            "distribution, 0: the most likely value). Received: "
            f"temperature={temperature!r}"
        )
    return float(temperature)


def _uniform_noise(shape: Sequence[Any], seed: Any) -> Any:
    """Uniform float32 noise in `[tiny, 1)`: never 0, never 1."""
    return keras.random.uniform(
        shape, minval=_NOISE_MIN, maxval=1.0, dtype="float32", seed=seed
    )


def _gumbel_argmax(logits: Any, temperature: float, noise: Any) -> Any:
    """A draw from `softmax(logits / T)` (the argmax when `T = 0`), int32."""
    if temperature == 0.0:
        return ops.cast(ops.argmax(logits, axis=-1), "int32")
    gumbel = -ops.log(-ops.log(noise))
    return ops.cast(ops.argmax(logits / temperature + gumbel, axis=-1), "int32")


# ------------------------------------------------------------- categorical
def _check_logits(logits: Any, pixels: Any) -> None:
    if logits.shape[-1] != NUM_INTENSITIES:
        raise ValueError(
            f"`logits` must end in {NUM_INTENSITIES} intensities. Received: "
            f"logits.shape={tuple(logits.shape)}"
        )
    leading = tuple(logits.shape[:-1])
    if len(leading) != len(pixels.shape) or any(
        a is not None and b is not None and a != b
        for a, b in zip(leading, tuple(pixels.shape), strict=True)
    ):
        raise ValueError(
            "`pixels` must have the shape of `logits` without its last axis. "
            f"Received: logits.shape={tuple(logits.shape)}, "
            f"pixels.shape={tuple(pixels.shape)}"
        )


def categorical_log_likelihood(logits: Any, pixels: Any) -> Any:
    """`log p(pixels)` in nats under a 256-way softmax per position.

    Args:
        logits: `(..., 256)`, from `CategoricalPixelHead`.
        pixels: integer `(...)` intensities in `[0, 255]`.

    Returns:
        float32 `(...)`: `log softmax(logits)[pixel]`.
    """
    pixels = check_pixels("pixels", pixels)
    _check_logits(logits, pixels)
    log_probs = ops.log_softmax(ops.cast(logits, "float32"), axis=-1)
    index = ops.expand_dims(ops.cast(pixels, "int32"), -1)
    return ops.take_along_axis(log_probs, index, axis=-1)[..., 0]


def categorical_bits_per_dim(logits: Any, pixels: Any) -> Any:
    """Mean negative log-likelihood in bits per dimension (per intensity).

    `-(1 / N) sum_i log2 p(x_i)` over the `N` intensities of `pixels`.

    Args:
        logits: `(..., 256)`.
        pixels: integer `(...)` intensities in `[0, 255]`.

    Returns:
        a float32 scalar.
    """
    return -ops.mean(categorical_log_likelihood(logits, pixels)) / _LN2


def sample_categorical(logits: Any, temperature: float = 1.0, seed: Any = None) -> Any:
    """Draws intensities from `softmax(logits / temperature)`.

    Args:
        logits: `(..., 256)`.
        temperature: `T >= 0`; `T = 1` samples the model, smaller values
            sharpen it, `T = 0` returns the mode (the argmax).
        seed: an integer or a `keras.random.SeedGenerator`.

    Returns:
        int32 `(...)` intensities in `[0, 255]`.
    """
    temperature = check_temperature(temperature)
    logits = ops.cast(logits, "float32")
    noise = None
    if temperature > 0.0:
        noise = _uniform_noise(ops.shape(logits), seed)
    return _gumbel_argmax(logits, temperature, noise)


# --------------------------------------------------------------------- DMOL
def dmol_num_parameters(num_mixtures: int, channels: int = 3) -> int:
    """`K (1 + 2C + C(C-1)/2)`: the mixture logit, `C` means, `C` log-scales
    and one coefficient per pair of channels, for each of `K` components
    (10 per component for RGB, PixelCNN++)."""
    check_positive_int("num_mixtures", num_mixtures)
    check_positive_int("channels", channels)
    return num_mixtures * (1 + 2 * channels + channels * (channels - 1) // 2)


def _split_parameters(
    params: Any, num_mixtures: int, channels: int, min_log_scale: float
) -> tuple[Any, Any, Any, Any]:
    """Mixture logits `(..., K)`, means and log-scales `(..., C, K)`, and
    coefficients `(..., C(C-1)/2, K)` (tanh-squashed), all float32."""
    expected = dmol_num_parameters(num_mixtures, channels)
    if params.shape[-1] != expected:
        raise ValueError(
            f"`params` must end in {expected} = K (1 + 2C + C(C-1)/2) "
            f"parameters for num_mixtures={num_mixtures}, channels={channels}. "
            f"Received: params.shape={tuple(params.shape)}"
        )
    params = ops.cast(params, "float32")
    k, c, pairs = num_mixtures, channels, channels * (channels - 1) // 2
    leading = tuple(ops.shape(params)[:-1])
    logits = params[..., :k]
    means = ops.reshape(params[..., k : k + c * k], (*leading, c, k))
    log_scales = ops.reshape(params[..., k + c * k : k + 2 * c * k], (*leading, c, k))
    log_scales = ops.maximum(log_scales, min_log_scale)
    coefficients = ops.tanh(
        ops.reshape(params[..., k + 2 * c * k :], (*leading, pairs, k))
    )
    return logits, means, log_scales, coefficients


def _conditional_means(means: Any, coefficients: Any, earlier: Any) -> Any:
    """`mu_c + sum_{c' < c} a_{c c'} x_{c'}` for every channel `c`.

    `means` is `(..., C, K)`, `coefficients` `(..., C(C-1)/2, K)` and
    `earlier` holds the scaled values `x` of the channels, `(..., C, 1)`.
    Returns `(..., C, K)`. The coefficient
    pairs are ordered `(1, 0), (2, 0), (2, 1), ...` (for RGB: g|r, b|r, b|g,
    PixelCNN++'s order).
    """
    channels = means.shape[-2]
    result, pair = [], 0
    for c in range(channels):
        mean = means[..., c, :]
        for earlier_c in range(c):
            mean = mean + coefficients[..., pair, :] * earlier[..., earlier_c, :]
            pair += 1
        result.append(mean)
    return ops.stack(result, axis=-2)


def _check_dmol_pixels(pixels: Any, params: Any, channels: int) -> Any:
    pixels = check_pixels("pixels", pixels)
    if pixels.shape[-1] != channels or len(pixels.shape) != len(params.shape):
        raise ValueError(
            f"`pixels` must be (..., channels={channels}), one pixel per "
            "position of `params`. Received: "
            f"pixels.shape={tuple(pixels.shape)}, params.shape={tuple(params.shape)}"
        )
    return pixels


def dmol_components(
    params: Any,
    pixels: Any,
    num_mixtures: int,
    channels: int = 3,
    min_log_scale: float = MIN_LOG_SCALE,
) -> tuple[Any, Any, Any]:
    """Each channel's logistic components given the pixel's earlier channels.

    PixelCNN++ (§2.2): channel `c`'s mean is `mu_c + sum_{c' < c} a_{c c'}
    x_{c'}`, linear in the earlier channels' scaled values `x`.

    Args:
        params, num_mixtures, channels, min_log_scale: as for
            `dmol_channel_log_probs`.
        pixels: integer `(..., C)` intensities; channel `c`'s mean reads
            channels `0 .. c - 1` only.

    Returns:
        Float32 mixture logits `(..., K)`, conditional means `(..., C, K)`
        and clipped log-scales `(..., C, K)`.
    """
    logits, means, log_scales, coefficients = _split_parameters(
        params, num_mixtures, channels, min_log_scale
    )
    # (..., C, 1): the scaled intensities.
    x = ops.expand_dims(ops.cast(pixels, "float32") / 127.5 - 1.0, -1)
    return logits, _conditional_means(means, coefficients, x), log_scales


def discretized_logistic_log_probs(
    intensities: Any, means: Any, log_scales: Any
) -> Any:
    """`log p(v)` of integer intensities `v` under discretized logistics.

    Intensity `v` is scaled to `x = v / 127.5 - 1` in `[-1, 1]`, and its bin
    is `[x - 1/255, x + 1/255]`; the first and last bins reach to `-inf` and
    `+inf`. With `sigma` the logistic CDF, mean `mu` and scale `s`
    (PixelCNN++, §2.1):

    - `v = 0`: `log sigma((x + 1/255 - mu) / s)`;
    - `v = 255`: `log(1 - sigma((x - 1/255 - mu) / s))`;
    - otherwise `log(sigma(a) - sigma(b))`, computed as `log sigma(a) +
      log(1 - sigma(b)) + log(1 - exp(b - a))` (softplus and `expm1`, exact
      in float32 for any `mu` and `s`).

    Args:
        intensities: integer intensities in `[0, 255]`.
        means: float32 `mu`, broadcastable with `intensities`.
        log_scales: float32 `log s`, broadcastable with `means`.

    Returns:
        float32, the broadcast shape of the three.
    """
    intensities = ops.cast(intensities, "int32")
    centered = ops.cast(intensities, "float32") / 127.5 - 1.0 - means
    inverse_scale = ops.exp(-log_scales)
    half_bin = 1.0 / 255.0
    upper = inverse_scale * (centered + half_bin)  # a
    lower = inverse_scale * (centered - half_bin)  # b
    log_cdf_upper = -ops.softplus(-upper)  # log sigma(a)
    log_survival_lower = -ops.softplus(lower)  # log (1 - sigma(b))
    # log(1 - exp(b - a)), with a - b = (2/255) / s; for a tiny a - b (a huge
    # scale) its expansion log(a - b) - (a - b) / 2 avoids log(0).
    width = 2.0 * half_bin * inverse_scale
    log_width = math.log(2.0 * half_bin) - log_scales
    log_gap = ops.where(
        width < 1e-4,
        log_width - width / 2.0,
        ops.log(-ops.expm1(-ops.maximum(width, 1e-4))),
    )
    log_mid = log_cdf_upper + log_survival_lower + log_gap
    return ops.where(
        ops.equal(intensities, 0),
        log_cdf_upper,
        ops.where(
            ops.equal(intensities, NUM_INTENSITIES - 1), log_survival_lower, log_mid
        ),
    )


def dmol_channel_log_probs(
    params: Any,
    pixels: Any,
    num_mixtures: int,
    channels: int = 3,
    min_log_scale: float = MIN_LOG_SCALE,
) -> Any:
    """`log p_k(x_c | x_<c)` of each channel under each logistic component.

    Each channel's discretized logistic (`discretized_logistic_log_probs`)
    with the mean given the earlier channels (`dmol_components`).

    Args:
        params: `(..., K (1 + 2C + C(C-1)/2))`, from
            `DiscretizedLogisticMixtureHead`.
        pixels: integer `(..., C)` intensities in `[0, 255]`.
        num_mixtures: `K`.
        channels: `C`.
        min_log_scale: lower bound on the log-scales (PixelCNN++: -7).

    Returns:
        float32 `(..., C, K)`; channel `c` depends on the pixels of channels
        `0 .. c` only.
    """
    pixels = ops.cast(_check_dmol_pixels(pixels, params, channels), "int32")
    _, means, log_scales = dmol_components(
        params, pixels, num_mixtures, channels, min_log_scale
    )
    return discretized_logistic_log_probs(
        ops.expand_dims(pixels, -1), means, log_scales
    )


def dmol_log_likelihood(
    params: Any,
    pixels: Any,
    num_mixtures: int,
    channels: int = 3,
    min_log_scale: float = MIN_LOG_SCALE,
) -> Any:
    """`log p(pixel)` in nats under the mixture of discretized logistics.

    `log sum_k pi_k prod_c p_k(x_c | x_<c)`, with `pi = softmax(logits)`,
    by log-sum-exp.

    Args:
        params, pixels, num_mixtures, channels, min_log_scale: as for
            `dmol_channel_log_probs`.

    Returns:
        float32 `(...)`, one value per pixel (all its channels).
    """
    log_probs = dmol_channel_log_probs(
        params, pixels, num_mixtures, channels, min_log_scale
    )
    logits, _, _, _ = _split_parameters(params, num_mixtures, channels, min_log_scale)
    # (..., K)
    joint = ops.log_softmax(logits, axis=-1) + ops.sum(log_probs, axis=-2)
    return ops.logsumexp(joint, axis=-1)


def dmol_bits_per_dim(
    params: Any,
    pixels: Any,
    num_mixtures: int,
    channels: int = 3,
    min_log_scale: float = MIN_LOG_SCALE,
) -> Any:
    """Mean negative log-likelihood in bits per dimension (per intensity):
    `-(1 / (N C)) sum_pixels log2 p(pixel)`.

    Returns:
        a float32 scalar.
    """
    log_likelihood = dmol_log_likelihood(
        params, pixels, num_mixtures, channels, min_log_scale
    )
    return -ops.mean(log_likelihood) / (channels * _LN2)


def sample_dmol(
    params: Any,
    num_mixtures: int,
    channels: int = 3,
    temperature: float = 1.0,
    seed: Any = None,
    min_log_scale: float = MIN_LOG_SCALE,
) -> Any:
    """Draws pixels from the mixture of discretized logistics.

    A component is drawn from `softmax(logits / T)`, then each channel in
    turn from its logistic with scale `T s`, its mean shifted by the
    coefficients times the channels already drawn (their discretized
    values, so that the draw follows exactly the distribution of
    `dmol_log_likelihood` at `T = 1`); the value is clipped to `[-1, 1]`
    and rounded to the nearest of the 256 bins. `T = 0` gives the most
    likely component's mean rounded to its bin, channel by channel.

    Args:
        params: `(..., K (1 + 2C + C(C-1)/2))`.
        num_mixtures, channels, min_log_scale: as for
            `dmol_channel_log_probs`.
        temperature: `T >= 0`.
        seed: an integer or a `keras.random.SeedGenerator`.

    Returns:
        int32 `(..., C)` intensities in `[0, 255]`.
    """
    temperature = check_temperature(temperature)
    logits, means, log_scales, coefficients = _split_parameters(
        params, num_mixtures, channels, min_log_scale
    )
    noise = component_noise = None
    if temperature > 0.0:
        # One draw for the component and the channels: (..., K + C).
        noise = _uniform_noise(
            (*tuple(ops.shape(logits)[:-1]), num_mixtures + channels), seed
        )
        component_noise = noise[..., :num_mixtures]
    # (..., 1, K): the chosen component, one-hot.
    chosen = ops.one_hot(
        _gumbel_argmax(logits, temperature, component_noise), num_mixtures
    )[..., None, :]
    means = ops.sum(means * chosen, axis=-1)  # (..., C)
    scales = ops.exp(ops.sum(log_scales * chosen, axis=-1))  # (..., C)
    coefficients = ops.sum(coefficients * chosen, axis=-1)  # (..., pairs)
    drawn, pair = [], 0
    for c in range(channels):
        mean = means[..., c]
        for earlier_c in range(c):
            mean = mean + coefficients[..., pair] * drawn[earlier_c]
            pair += 1
        x = mean
        if temperature > 0.0:
            u = noise[..., num_mixtures + c]
            x = x + temperature * scales[..., c] * (ops.log(u) - ops.log(1.0 - u))
        value = ops.round(ops.clip((x + 1.0) * 127.5, 0.0, 255.0))
        drawn.append(value / 127.5 - 1.0)
    pixels = ops.stack([(x + 1.0) * 127.5 for x in drawn], axis=-1)
    return ops.cast(ops.round(pixels), "int32")


# ------------------------------------------------------------------- layers
class _PixelHead(keras.layers.Layer):
    """A linear map from the model's features to a distribution's parameters."""

    def __init__(
        self,
        use_bias: bool = True,
        kernel_initializer: str | keras.initializers.Initializer = "glorot_uniform",
        bias_initializer: str | keras.initializers.Initializer = "zeros",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.use_bias = use_bias
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)

    @property
    def num_parameters(self) -> int:
        raise NotImplementedError

    def build(self, input_shape: Sequence[int | None]) -> None:
        if input_shape[-1] is None:
            raise ValueError(
                f"The last dimension of the {type(self).__name__} inputs must "
                f"be known. Received: inputs.shape={tuple(input_shape)}"
            )
        self.kernel = self.add_weight(
            name="kernel",
            shape=(int(input_shape[-1]), self.num_parameters),
            initializer=self.kernel_initializer,
        )
        self.bias = None
        if self.use_bias:
            self.bias = self.add_weight(
                name="bias",
                shape=(self.num_parameters,),
                initializer=self.bias_initializer,
            )
        self.built = True

    def call(self, inputs: Any) -> Any:
        return linear(ops.cast(inputs, self.compute_dtype), self.kernel, self.bias)

    def compute_output_shape(
        self, input_shape: Sequence[int | None]
    ) -> tuple[int | None, ...]:
        return (*tuple(input_shape[:-1]), self.num_parameters)

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(
            {
                "use_bias": self.use_bias,
                "kernel_initializer": keras.initializers.serialize(
                    self.kernel_initializer
                ),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            }
        )
        return config


@keras.saving.register_keras_serializable(package="keras_transformer")
class CategoricalPixelHead(_PixelHead):
    """256-way categorical output for every channel-wise position.

    `logits = x W + b` with `W` of shape `(features, 256)`: with channel-wise
    positions each position is one intensity of one channel, so the model
    predicts `p(x_i | x_<i) = softmax(logits_i)` for every channel of every
    pixel, the earlier channels of the pixel included in `x_<i`.

    Args:
        use_bias: whether the map has a bias.
        kernel_initializer, bias_initializer: initializers of `W` and `b`.
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Call arguments:
        inputs: `(..., features)`.

    Returns:
        logits `(..., 256)` in the layer's compute dtype.

    Example:
    >>> import numpy as np
    >>> head = CategoricalPixelHead()
    >>> logits = head(np.random.rand(2, 4, 12, 16).astype("float32"))
    >>> pixels = np.random.randint(0, 256, (2, 4, 12))
    >>> bits = head.bits_per_dim(logits, pixels)
    >>> tuple(head.sample(logits, temperature=0.0).shape)
    (2, 4, 12)

    Reference: Parmar et al. (2018), "Image Transformer", §3.4 (categorical
    output over 256 intensities per channel).
    """

    @property
    def num_parameters(self) -> int:
        return NUM_INTENSITIES

    def log_likelihood(self, logits: Any, pixels: Any) -> Any:
        """`categorical_log_likelihood(logits, pixels)`: nats, `(...)`."""
        return categorical_log_likelihood(logits, pixels)

    def bits_per_dim(self, logits: Any, pixels: Any) -> Any:
        """`categorical_bits_per_dim(logits, pixels)`: a scalar."""
        return categorical_bits_per_dim(logits, pixels)

    def sample(self, logits: Any, temperature: float = 1.0, seed: Any = None) -> Any:
        """`sample_categorical(logits, temperature, seed)`: int32 `(...)`."""
        return sample_categorical(logits, temperature, seed)


@keras.saving.register_keras_serializable(package="keras_transformer")
class DiscretizedLogisticMixtureHead(_PixelHead):
    """A mixture of discretized logistics over the channels of each pixel.

    `p(pixel) = sum_k pi_k prod_c p_k(x_c | x_<c)`, each `p_k(. | x_<c)` a
    logistic with mean `mu_kc + sum_{c'<c} a_kcc' x_c'` and scale `s_kc`,
    integrated over the bin of the intensity (PixelCNN++, Salimans et al.,
    2017, Eqs. 2-3). One position per pixel: the inputs are
    `(..., features)` for each pixel, and the layer maps them linearly to
    `K (1 + 2C + C(C-1)/2)` parameters, laid out as `[K mixture logits | C x
    K means | C x K log-scales | C(C-1)/2 x K coefficients]` (channel-major
    within each group; the coefficients are squashed by `tanh`, the
    log-scales bounded below by `min_log_scale`).

    Args:
        num_mixtures: `K` (PixelCNN++ and the Image Transformer: 10).
        channels: `C` (3 for RGB: 10 parameters per component).
        min_log_scale: lower bound on the log-scales (PixelCNN++: -7).
        use_bias, kernel_initializer, bias_initializer: as for
            `CategoricalPixelHead`.
        **kwargs: base layer arguments.

    Call arguments:
        inputs: `(..., features)`, one position per pixel.

    Returns:
        the parameters `(..., K (1 + 2C + C(C-1)/2))`.

    Example:
    >>> import numpy as np
    >>> head = DiscretizedLogisticMixtureHead(num_mixtures=5)
    >>> params = head(np.random.rand(2, 4, 8, 16).astype("float32"))
    >>> tuple(params.shape)
    (2, 4, 8, 50)
    >>> tuple(head.sample(params, seed=0).shape)
    (2, 4, 8, 3)

    Reference: Salimans et al. (2017), "PixelCNN++", §2.1-2.2; Parmar et
    al. (2018), "Image Transformer", §3.4 (DMOL output).
    """

    def __init__(
        self,
        num_mixtures: int = 10,
        channels: int = 3,
        min_log_scale: float = MIN_LOG_SCALE,
        **kwargs: Any,
    ) -> None:
        dmol_num_parameters(num_mixtures, channels)  # validates both
        check_number("min_log_scale", min_log_scale)
        super().__init__(**kwargs)
        self.num_mixtures = num_mixtures
        self.channels = channels
        self.min_log_scale = float(min_log_scale)

    @property
    def num_parameters(self) -> int:
        return dmol_num_parameters(self.num_mixtures, self.channels)

    def log_likelihood(self, params: Any, pixels: Any) -> Any:
        """`dmol_log_likelihood` with the layer's settings: nats, `(...)`."""
        return dmol_log_likelihood(
            params, pixels, self.num_mixtures, self.channels, self.min_log_scale
        )

    def bits_per_dim(self, params: Any, pixels: Any) -> Any:
        """`dmol_bits_per_dim` with the layer's settings: a scalar."""
        return dmol_bits_per_dim(
            params, pixels, self.num_mixtures, self.channels, self.min_log_scale
        )

    def sample(self, params: Any, temperature: float = 1.0, seed: Any = None) -> Any:
        """`sample_dmol` with the layer's settings: int32 `(..., C)`."""
        settings = (self.num_mixtures, self.channels)
        return sample_dmol(params, *settings, temperature, seed, self.min_log_scale)

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(
            {
                "num_mixtures": self.num_mixtures,
                "channels": self.channels,
                "min_log_scale": self.min_log_scale,
            }
        )
        return config

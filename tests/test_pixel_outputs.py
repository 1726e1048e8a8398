"""Tests of the pixel output heads: 256-way categorical and discretized
logistic mixture (Image Transformer §3.4; PixelCNN++)."""

from __future__ import annotations

import math
from pathlib import Path

import keras
import numpy as np
import pytest

from keras_transformer.layers import (
    CategoricalPixelHead,
    DiscretizedLogisticMixtureHead,
)
from keras_transformer.layers.pixel_outputs import (
    categorical_bits_per_dim,
    categorical_log_likelihood,
    dmol_bits_per_dim,
    dmol_channel_log_probs,
    dmol_log_likelihood,
    dmol_num_parameters,
    sample_categorical,
    sample_dmol,
)
from tests.layer_testing import run_layer_test


def _numpy(x: object) -> np.ndarray:
    return np.asarray(keras.ops.convert_to_numpy(x))


def _sigmoid(z: object) -> np.ndarray:
    """The logistic CDF in float64, accurate in both tails."""
    z = np.asarray(z, "float64")
    e = np.exp(-np.abs(z))
    return np.where(z >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def _cdf_difference(upper: object, lower: object) -> np.ndarray:
    """sigma(upper) - sigma(lower) for upper > lower, by direct CDF
    differences; of the complements when both are positive (no cancellation
    between two numbers near 1)."""
    upper, lower = np.asarray(upper, "float64"), np.asarray(lower, "float64")
    return np.where(
        lower >= 0,
        _sigmoid(-lower) - _sigmoid(-upper),
        _sigmoid(upper) - _sigmoid(lower),
    )


def _random_params(
    shape: tuple[int, ...], num_mixtures: int, channels: int, seed: int = 0
) -> np.ndarray:
    """Parameters with means in [-1, 1] and log-scales in [-4, -1]."""
    rng = np.random.default_rng(seed)
    k, c = num_mixtures, channels
    pairs = c * (c - 1) // 2
    return np.concatenate(
        [
            rng.normal(size=(*shape, k)),
            rng.uniform(-1.0, 1.0, size=(*shape, c * k)),
            rng.uniform(-4.0, -1.0, size=(*shape, c * k)),
            rng.normal(size=(*shape, pairs * k)),
        ],
        axis=-1,
    ).astype("float32")


def _numpy_dmol_probability(
    params: np.ndarray, pixel: np.ndarray, k: int, c: int
) -> float:
    """p(pixel) by direct CDF differences in float64, PixelCNN++'s model."""
    params = params.astype("float64")
    pairs = c * (c - 1) // 2
    logits = params[:k]
    means = params[k : k + c * k].reshape(c, k)
    log_scales = np.maximum(params[k + c * k : k + 2 * c * k].reshape(c, k), -7.0)
    coefficients = np.tanh(params[k + 2 * c * k :].reshape(pairs, k))
    weights = np.exp(logits - logits.max())
    weights /= weights.sum()
    x = pixel / 127.5 - 1.0
    total = 0.0
    for component in range(k):
        probability, pair = weights[component], 0
        for channel in range(c):
            mean = means[channel, component]
            for earlier in range(channel):
                mean += coefficients[pair, component] * x[earlier]
                pair += 1
            scale = math.exp(log_scales[channel, component])
            upper = (x[channel] + 1 / 255 - mean) / scale
            lower = (x[channel] - 1 / 255 - mean) / scale
            # The edge bins reach to +-inf.
            upper = np.inf if pixel[channel] == 255 else upper
            lower = -np.inf if pixel[channel] == 0 else lower
            probability *= _cdf_difference(upper, lower)
        total += probability
    return total


# --------------------------------------------------------------- contracts
def test_categorical_head_contract(tmp_path: Path) -> None:
    x = np.random.default_rng(0).normal(size=(2, 4, 12, 16)).astype("float32")
    run_layer_test(
        CategoricalPixelHead, {}, [x], (2, 4, 12, 256), tmp_path, expected_num_weights=2
    )


def test_dmol_head_contract(tmp_path: Path) -> None:
    x = np.random.default_rng(0).normal(size=(2, 4, 8, 16)).astype("float32")
    layer = run_layer_test(
        DiscretizedLogisticMixtureHead,
        {"num_mixtures": 3, "channels": 3},
        [x],
        (2, 4, 8, 30),
        tmp_path,
        expected_num_weights=2,
    )
    assert layer.get_config()["min_log_scale"] == -7.0


def test_parameter_counts() -> None:
    assert dmol_num_parameters(10) == 100  # PixelCNN++ on RGB: 10 per component
    assert dmol_num_parameters(5, channels=1) == 15
    assert dmol_num_parameters(2, channels=4) == 2 * (1 + 8 + 6)


# ------------------------------------------------------------- categorical
def test_categorical_bits_per_dim_matches_numpy() -> None:
    rng = np.random.default_rng(1)
    logits = rng.normal(scale=3.0, size=(2, 4, 12, 256)).astype("float32")
    pixels = rng.integers(0, 256, size=(2, 4, 12))
    shifted = logits.astype("float64") - logits.max(-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    picked = np.take_along_axis(log_probs, pixels[..., None], -1)[..., 0]
    np.testing.assert_allclose(
        _numpy(categorical_log_likelihood(logits, pixels)), picked, rtol=1e-5
    )
    expected = -picked.mean() / math.log(2.0)
    bits = _numpy(CategoricalPixelHead().bits_per_dim(logits, pixels))
    np.testing.assert_allclose(bits, expected, rtol=1e-5)
    # Uniform logits: exactly 8 bits per dimension.
    uniform = np.zeros((3, 256), "float32")
    np.testing.assert_allclose(
        _numpy(categorical_bits_per_dim(uniform, np.array([0, 17, 255]))), 8.0, 1e-6
    )


def test_categorical_sampling_shapes_and_mode() -> None:
    rng = np.random.default_rng(2)
    logits = rng.normal(size=(2, 4, 12, 256)).astype("float32")
    mode = logits.argmax(-1)
    logits[np.arange(2)[:, None, None], np.arange(4)[:, None], np.arange(12), mode] += 5
    samples = _numpy(sample_categorical(logits, seed=3))
    assert samples.shape == (2, 4, 12) and samples.dtype == np.int32
    assert samples.min() >= 0 and samples.max() <= 255
    np.testing.assert_array_equal(_numpy(sample_categorical(logits, 0.0)), mode)
    np.testing.assert_array_equal(
        _numpy(sample_categorical(logits, temperature=1e-3, seed=4)), mode
    )


def test_categorical_sampling_follows_the_softmax() -> None:
    logits = np.full((20000, 256), -30.0, "float32")
    logits[:, [10, 20, 30]] = np.log([0.5, 0.3, 0.2])
    samples = _numpy(sample_categorical(logits, seed=5))
    frequencies = np.bincount(samples, minlength=256) / len(samples)
    np.testing.assert_allclose(frequencies[[10, 20, 30]], [0.5, 0.3, 0.2], atol=0.02)
    assert set(np.unique(samples).tolist()) == {10, 20, 30}


# ------------------------------------------------------------------- DMOL
def test_single_logistic_equals_cdf_difference() -> None:
    values = np.arange(256)
    for mean, log_scale in [(0.1, -3.0), (-0.97, -4.0), (0.99, -2.0), (0.3, 0.5)]:
        params = np.tile(np.float32([0.0, mean, log_scale]), (256, 1))
        log_probs = _numpy(dmol_log_likelihood(params, values[:, None], 1, channels=1))
        scale = math.exp(log_scale)
        x = values / 127.5 - 1.0
        upper = np.where(values == 255, np.inf, (x + 1 / 255 - mean) / scale)
        lower = np.where(values == 0, -np.inf, (x - 1 / 255 - mean) / scale)
        expected = _cdf_difference(upper, lower)
        np.testing.assert_allclose(np.exp(log_probs), expected, atol=1e-6)
        kept = expected > 1e-200
        np.testing.assert_allclose(
            log_probs[kept], np.log(expected[kept]), rtol=1e-4, atol=1e-6
        )
        np.testing.assert_allclose(np.exp(log_probs).sum(), 1.0, atol=1e-5)


def test_edges_take_the_tails() -> None:
    # A mean far below the range: nearly all mass in intensity 0; far above:
    # in 255. The edge bins reach to -inf and +inf.
    low = np.float32([[0.0, -3.0, -1.0]])
    high = np.float32([[0.0, 3.0, -1.0]])
    scale = math.exp(-1.0)
    p0 = _numpy(dmol_log_likelihood(low, np.array([[0]]), 1, channels=1))[0]
    p255 = _numpy(dmol_log_likelihood(high, np.array([[255]]), 1, channels=1))[0]
    np.testing.assert_allclose(
        p0, np.log(_sigmoid((-1 + 1 / 255 + 3.0) / scale)), rtol=1e-5, atol=1e-7
    )
    np.testing.assert_allclose(
        p255, np.log(1 - _sigmoid((1 - 1 / 255 - 3.0) / scale)), rtol=1e-5, atol=1e-7
    )
    assert p0 > -0.01 and p255 > -0.01
    # The opposite edges are extremely unlikely but finite (no log(0)).
    far = _numpy(dmol_log_likelihood(low, np.array([[255]]), 1, channels=1))[0]
    expected = -np.logaddexp(0.0, (1 - 1 / 255 + 3.0) / scale)
    np.testing.assert_allclose(far, expected, rtol=1e-5)


def test_extreme_parameters_stay_finite() -> None:
    # Sharp logistics far from the pixel, and a huge scale.
    params = np.float32(
        [[0.0, 20.0, -7.0], [0.0, -20.0, -50.0], [0.0, 0.0, 60.0], [0.0, 0.5, -7.0]]
    )
    pixels = np.array([[128], [3], [77], [0]])
    log_probs = _numpy(dmol_log_likelihood(params, pixels, 1, channels=1))
    assert np.all(np.isfinite(log_probs)) and np.all(log_probs <= 0.0)
    # A huge scale spreads the mass: the density at the mean, 1 / (4 s),
    # times the bin width 2 / 255.
    np.testing.assert_allclose(
        log_probs[2], math.log(2 / 255) - 60.0 - math.log(4.0), rtol=1e-6
    )
    # Far left tail: log(sigma(a) - sigma(b)) = a + log(1 - exp(b - a)).
    x, s = 128 / 127.5 - 1.0, math.exp(-7.0)
    a, b = (x + 1 / 255 - 20.0) / s, (x - 1 / 255 - 20.0) / s
    np.testing.assert_allclose(log_probs[0], a + np.log1p(-np.exp(b - a)), rtol=1e-4)


def test_rgb_mixture_matches_numpy() -> None:
    k, c = 2, 3
    rng = np.random.default_rng(6)
    params = _random_params((40,), k, c, seed=6)
    pixels = rng.integers(0, 256, size=(40, c))
    pixels[:4] = [[0, 0, 0], [255, 255, 255], [0, 128, 255], [255, 3, 0]]
    log_probs = _numpy(dmol_log_likelihood(params, pixels, k, c))
    expected = np.array(
        [
            _numpy_dmol_probability(p, x, k, c)
            for p, x in zip(params, pixels, strict=True)
        ]
    )
    kept = expected > 1e-200
    assert kept[:4].all() and kept.sum() > 20
    np.testing.assert_allclose(log_probs[kept], np.log(expected[kept]), rtol=1e-4)
    bits = _numpy(DiscretizedLogisticMixtureHead(k, c).bits_per_dim(params, pixels))
    np.testing.assert_allclose(bits, -log_probs.mean() / (c * math.log(2)), rtol=1e-6)
    np.testing.assert_allclose(
        _numpy(dmol_bits_per_dim(params, pixels, k, c)), bits, rtol=1e-6
    )


@pytest.mark.parametrize("channel", [0, 1, 2])
def test_each_channel_sums_to_one_given_the_earlier_channels(channel: int) -> None:
    k, c = 3, 3
    params = np.repeat(_random_params((1,), k, c, seed=7), 256, axis=0)
    pixels = np.zeros((256, c), "int32")
    pixels[:, :channel] = [37, 200][:channel]
    pixels[:, channel] = np.arange(256)
    pixels[:, channel + 1 :] = 91  # later channels do not matter
    log_probs = _numpy(dmol_channel_log_probs(params, pixels, k, c))
    assert log_probs.shape == (256, c, k)
    np.testing.assert_allclose(np.exp(log_probs[:, channel]).sum(0), 1.0, atol=1e-5)
    # Channel c depends on channels 0 .. c only.
    other = pixels.copy()
    other[:, channel + 1 :] = 5
    np.testing.assert_array_equal(
        _numpy(dmol_channel_log_probs(params, other, k, c))[:, : channel + 1],
        log_probs[:, : channel + 1],
    )


def test_grayscale_mixture_sums_to_one() -> None:
    params = np.repeat(_random_params((1,), 4, 1, seed=8), 256, axis=0)
    log_probs = _numpy(dmol_log_likelihood(params, np.arange(256)[:, None], 4, 1))
    np.testing.assert_allclose(np.exp(log_probs).sum(), 1.0, atol=1e-5)


def test_dmol_sampling_shapes_and_mode() -> None:
    k, c = 3, 3
    params = _random_params((2, 4, 8), k, c, seed=9)
    head = DiscretizedLogisticMixtureHead(num_mixtures=k, channels=c)
    samples = _numpy(head.sample(params, seed=10))
    assert samples.shape == (2, 4, 8, 3) and samples.dtype == np.int32
    assert samples.min() >= 0 and samples.max() <= 255
    # Temperature 0: the most likely component's means, channel by channel,
    # each shifted by the coefficients times the earlier (rounded) channels.
    flat = params.reshape(-1, params.shape[-1]).astype("float64")
    component = flat[:, :k].argmax(-1)
    rows = np.arange(len(flat))
    means = flat[:, k : k + c * k].reshape(-1, c, k)[rows, :, component]
    coefficients = np.tanh(flat[:, k + 2 * c * k :].reshape(-1, 3, k))[
        rows, :, component
    ]
    expected = np.zeros((len(flat), c), "int64")
    x = np.zeros((len(flat), c))
    pair = 0
    for channel in range(c):
        mean = means[:, channel].copy()
        for earlier in range(channel):  # pairs (1, 0), (2, 0), (2, 1)
            mean += coefficients[:, pair] * x[:, earlier]
            pair += 1
        value = np.round(np.clip((mean + 1) * 127.5, 0, 255))
        expected[:, channel] = value
        x[:, channel] = value / 127.5 - 1.0
    mode = _numpy(head.sample(params, temperature=0.0)).reshape(-1, c)
    np.testing.assert_array_equal(mode, expected)


def test_dmol_sampling_follows_the_likelihood() -> None:
    # Two channels, two components: the sampled marginal of the second
    # channel (which depends on the first) matches the model's.
    k, c = 2, 2
    params = _random_params((1,), k, c, seed=11)
    samples = _numpy(sample_dmol(np.repeat(params, 50000, 0), k, c, seed=12))
    grid = np.stack(np.meshgrid(np.arange(256), np.arange(256), indexing="ij"), -1)
    grid = grid.reshape(-1, 2)
    joint = np.exp(
        _numpy(dmol_log_likelihood(np.repeat(params, len(grid), 0), grid, k, c))
    ).reshape(256, 256)
    np.testing.assert_allclose(joint.sum(), 1.0, atol=1e-4)
    for channel in range(c):
        model = joint.sum(axis=1 - channel)
        sampled = np.bincount(samples[:, channel], minlength=256) / len(samples)
        assert 0.5 * np.abs(model - sampled).sum() < 0.06


# ------------------------------------------------------------ bad inputs
@pytest.mark.parametrize(
    ("pixels", "match"),
    [
        (np.array([[0.0, 12.0, 255.0]], "float32"), r"`pixels`.*dtype=float32"),
        (np.array([[0, 12, 256]]), r"`pixels`.*from 0 to 256"),
        (np.array([[-1, 12, 255]]), r"`pixels`.*from -1 to 255"),
    ],
)
def test_categorical_rejects_bad_pixels(pixels: np.ndarray, match: str) -> None:
    logits = np.zeros((1, 3, 256), "float32")
    with pytest.raises(ValueError, match=match):
        categorical_bits_per_dim(logits, pixels)
    with pytest.raises(ValueError, match=match):
        categorical_bits_per_dim(logits, keras.ops.convert_to_tensor(pixels))


def test_categorical_rejects_mismatched_shapes() -> None:
    with pytest.raises(ValueError, match="`logits` must end in 256"):
        categorical_log_likelihood(np.zeros((2, 10), "float32"), np.zeros(2, "int32"))
    with pytest.raises(ValueError, match="`pixels` must have the shape"):
        categorical_log_likelihood(np.zeros((2, 256), "float32"), np.zeros(3, "int32"))


def test_dmol_rejects_bad_pixels_and_parameters() -> None:
    params = _random_params((2,), 2, 3)
    with pytest.raises(ValueError, match=r"`pixels`.*from 0 to 300"):
        dmol_log_likelihood(params, np.array([[0, 1, 2], [3, 300, 5]]), 2, 3)
    with pytest.raises(ValueError, match=r"`pixels`.*dtype=float64"):
        dmol_log_likelihood(params, np.zeros((2, 3)), 2, 3)
    with pytest.raises(ValueError, match=r"`pixels`.*channels=3"):
        dmol_log_likelihood(params, np.zeros((2, 1), "int32"), 2, 3)
    with pytest.raises(ValueError, match=r"`params` must end in 20"):
        dmol_log_likelihood(params[:, :-1], np.zeros((2, 3), "int32"), 2, 3)


@pytest.mark.parametrize("temperature", [-1.0, float("nan"), "1", True])
def test_bad_temperature_raises(temperature: object) -> None:
    with pytest.raises(ValueError, match="`temperature`"):
        sample_categorical(np.zeros((1, 256), "float32"), temperature)
    with pytest.raises(ValueError, match="`temperature`"):
        sample_dmol(_random_params((1,), 2, 3), 2, 3, temperature)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"num_mixtures": 0}, "num_mixtures"),
        ({"channels": -1}, "channels"),
        ({"min_log_scale": float("inf")}, "min_log_scale"),
    ],
)
def test_bad_dmol_head_arguments_raise(kwargs: dict, name: str) -> None:
    with pytest.raises(ValueError, match=f"`{name}`"):
        DiscretizedLogisticMixtureHead(**kwargs)


# ------------------------------------------------------ compiled functions
class _LogLikelihoods(keras.layers.Layer):
    """Both log-likelihoods inside a layer, so that `predict` compiles them."""

    def call(self, logits: object, params: object, pixels: object) -> object:
        categorical = categorical_log_likelihood(logits, pixels)
        dmol = dmol_log_likelihood(params, pixels[..., None], 2, channels=1)
        return keras.ops.stack([categorical, dmol], axis=-1)


def test_log_likelihoods_run_in_compiled_functions() -> None:
    """Traced values cannot be range-checked; the dtype check still holds
    and the results equal the eager ones."""
    rng = np.random.default_rng(13)
    logits = rng.normal(size=(3, 5, 256)).astype("float32")
    params = _random_params((3, 5), 2, 1, seed=13)
    pixels = rng.integers(0, 256, size=(3, 5)).astype("int32")
    inputs = [
        keras.Input((5, 256)),
        keras.Input((5, 6)),
        keras.Input((5,), dtype="int32"),
    ]
    model = keras.Model(inputs, _LogLikelihoods()(*inputs))
    compiled = model.predict([logits, params, pixels], verbose=0)
    np.testing.assert_allclose(
        compiled[..., 0], _numpy(categorical_log_likelihood(logits, pixels)), rtol=1e-5
    )
    np.testing.assert_allclose(
        compiled[..., 1],
        _numpy(dmol_log_likelihood(params, pixels[..., None], 2, 1)),
        rtol=1e-5,
    )

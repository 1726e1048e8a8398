"""Tests of image completion with the cached step (Image Transformer, §5)."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.decoding.images import (
    dmol_intensity_log_probs,
    image_search_step,
)
from keras_transformer.image_sampling import (
    ImageSampler,
    complete_images,
    sample_images,
)
from keras_transformer.layers.local_attention_2d import (
    GENERATION_ORDERS,
    local_2d_attention_mask,
)
from keras_transformer.models import (
    ImageTransformerStack,
    build_image_transformer,
    image_bits_per_dim,
)
from tests.models.test_image_transformer import ATTENTION, tiny_config

# Some of the combinations; the cached step itself is checked for all six
# in tests/models/test_image_transformer.py.
CASES = [
    ("categorical", "local_2d"),
    ("dmol", "local_2d"),
    ("dmol", "local_1d"),
    ("dmol", "full"),
]


def _images(batch: int = 3, seed: int = 0) -> np.ndarray:
    return (
        np.random.default_rng(seed).integers(0, 256, (batch, 4, 4, 3)).astype("int32")
    )


def _model(output: str, attention: str, seed: int = 0, **changes) -> keras.Model:
    keras.utils.set_random_seed(seed)
    return build_image_transformer(tiny_config(output, attention, **changes))


@pytest.mark.parametrize("order", GENERATION_ORDERS)
@pytest.mark.parametrize(("output", "attention"), CASES)
def test_given_rows_never_change(output: str, attention: str, order: str) -> None:
    model = _model(output, attention, generation_order=order)
    images = _images()
    # In the block order the given rows are whole rows of 2-row query blocks.
    blocks = attention == "local_2d" and order == "blocks"
    # One sampler for every call: the given rows are an argument of its one
    # traced search, not a reason to trace again.
    sampler = ImageSampler(model)
    for given in (0, 2, 4) if blocks else (0, 1, 3, 4):
        completed = sampler.complete(images, given, temperature=1.0, seed=1)
        assert completed.shape == images.shape and completed.dtype == np.int32
        np.testing.assert_array_equal(completed[:, :given], images[:, :given])
        assert completed.min() >= 0 and completed.max() <= 255
    (search,) = sampler._searches.values()
    assert search.experimental_get_tracing_count() == 1
    # With every row given, nothing is drawn.
    np.testing.assert_array_equal(sampler.complete(images, 4, seed=0), images)


@pytest.mark.parametrize("order", GENERATION_ORDERS)
@pytest.mark.parametrize(("output", "attention"), CASES)
def test_temperature_zero_is_greedy_under_the_full_forward_pass(
    output: str, attention: str, order: str
) -> None:
    """Every drawn value is the mode of the model's distribution given the
    completed image before it: the full pass on the result reproduces it
    (for DMOL, each channel's mode given the channels before it)."""
    model = _model(output, attention, seed=1, generation_order=order)
    images = _images(seed=2)
    given = 2
    completed = ImageSampler(model).complete(images, given, temperature=0.0)
    outputs = model(completed)
    if output == "categorical":
        modes = keras.ops.convert_to_numpy(
            ImageTransformerStack.of(model).sample(outputs, temperature=0.0)
        )
    else:
        modes = _dmol_modes(model, outputs, completed)
    np.testing.assert_array_equal(completed[:, given:], modes[:, given:])
    if output == "categorical":
        argmax = np.argmax(keras.ops.convert_to_numpy(outputs), axis=-1)
        np.testing.assert_array_equal(completed[:, given:], argmax[:, given:])


def _dmol_modes(model, outputs, pixels) -> np.ndarray:  # noqa: ANN001
    """`argmax_v p(x_c = v | x_<c)` of every channel of every pixel."""
    head = model.get_layer("pixel_head")
    params = keras.ops.convert_to_numpy(outputs).reshape(-1, outputs.shape[-1])
    flat = pixels.reshape(-1, pixels.shape[-1])
    modes = [
        np.argmax(
            dmol_intensity_log_probs(params, flat, c, head.num_mixtures, head.channels),
            axis=-1,
        )
        for c in range(head.channels)
    ]
    return np.stack(modes, axis=-1).reshape(pixels.shape)


@pytest.mark.parametrize("order", GENERATION_ORDERS)
@pytest.mark.parametrize(("output", "attention"), CASES)
def test_the_search_step_gives_the_uncached_models_distribution(
    output: str, attention: str, order: str
) -> None:
    """Fed an image in its generation order, the step function the search
    runs gives normalized log-probabilities over the 256 intensities whose
    values at the image's intensities add up to the full forward pass's
    log-likelihood (`image_bits_per_dim`): what the search draws from at
    temperature 1 is the model's distribution."""
    model = _model(output, attention, seed=15, generation_order=order)
    images = _images(2, seed=16)
    stack = ImageTransformerStack.of(model)
    step_fn, state = image_search_step(stack, 2)
    order_positions = np.asarray(stack.generation_positions)
    # (batch, n): the intensities in generation order.
    values = images.reshape(2, len(order_positions), -1)[:, order_positions]
    values = values.reshape(2, -1)
    token, total = np.full(2, 2, np.int32), np.zeros(2)
    for index in range(values.shape[1]):
        log_probs, state = step_fn(tf.constant(token), state, tf.constant(index))
        log_probs = log_probs.numpy()
        assert log_probs.shape == (2, 256)
        np.testing.assert_allclose(
            np.log(np.exp(log_probs.astype(np.float64)).sum(-1)), 0.0, atol=1e-5
        )
        token = values[:, index].astype(np.int32)
        total += log_probs[np.arange(2), token]
    bits = -total.sum() / (values.size * np.log(2.0))
    np.testing.assert_allclose(bits, image_bits_per_dim(model, images), rtol=1e-5)


@pytest.mark.parametrize("output", ["categorical", "dmol"])
@pytest.mark.parametrize("order", GENERATION_ORDERS)
def test_the_sampler_writes_in_a_topological_order_of_the_mask(
    output: str, order: str
) -> None:
    """The positions the compiled loop writes, recorded as it runs: every
    position once, and no position attends to one written after it."""
    model = _model(output, "local_2d", seed=13, generation_order=order)
    config = tiny_config(output, "local_2d", generation_order=order)
    sampler = ImageSampler(model)
    written: list[int] = []
    step = sampler.stack.decode_beam_step

    def recording_step(token_ids, caches, index, labels=None):  # noqa: ANN001, ANN202
        record = tf.py_function(
            lambda i: written.append(int(i)) or 0, [index], tf.int32
        )
        with tf.control_dependencies([record]):
            return step(token_ids, caches, tf.identity(index), labels)

    sampler.stack.decode_beam_step = recording_step
    sampler.complete(_images(1), 0, temperature=1.0, seed=0)
    rows, cols = config.grid_shape
    assert sorted(written) == list(range(rows * cols))
    np.testing.assert_array_equal(written, sampler.generation_positions)
    # (n,): the step at which each position was written.
    written_at = np.argsort(written)
    mask = keras.ops.convert_to_numpy(
        local_2d_attention_mask(
            rows,
            cols,
            config.query_block,
            config.memory_flange,
            causal=True,
            generation_order=order,
        )
    )
    queries, keys = np.nonzero(mask)
    assert np.all(written_at[keys] <= written_at[queries])
    if order == "blocks":
        # Raster order over the image would break the paper's mask.
        assert np.any(keys > queries)


def test_given_rows_must_be_whole_rows_of_query_blocks() -> None:
    model = _model("dmol", "local_2d", seed=14)  # query blocks of 2 x 2
    with pytest.raises(
        ValueError, match=r"multiple of 2.*given_rows=3\. Pass given_rows=2 or 4"
    ):
        complete_images(model, _images(1), 3)
    image_order = _model("dmol", "local_2d", seed=14, generation_order="image")
    completed = complete_images(image_order, _images(1), 3, seed=0)
    np.testing.assert_array_equal(completed[:, :3], _images(1)[:, :3])


def test_low_temperature_approaches_the_argmax() -> None:
    model = _model("categorical", "local_2d", seed=3)
    images = _images(seed=4)
    sampler = ImageSampler(model)
    greedy = sampler.complete(images, 2, temperature=0.0)
    cold = sampler.complete(images, 2, temperature=1e-4, seed=5)
    np.testing.assert_array_equal(cold, greedy)
    warm = sampler.complete(images, 2, temperature=1.0, seed=5)
    assert not np.array_equal(warm, greedy)


def test_seeds_make_draws_reproducible(autograph_calls: list[str]) -> None:
    """Same seed, same draws; the search is traced without AutoGraph."""
    model = _model("dmol", "local_2d", seed=6)
    images = _images(seed=7)
    sampler = ImageSampler(model)
    first = sampler.complete(images, 2, temperature=1.0, seed=11)
    again = sampler.complete(images, 2, temperature=1.0, seed=11)
    other = sampler.complete(images, 2, temperature=1.0, seed=12)
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)
    assert autograph_calls == []


@pytest.mark.parametrize("temperature", [1.0, 0.5])
def test_draws_follow_the_distribution_at_the_temperature(temperature: float) -> None:
    """With a zero kernel in the head every intensity has the distribution
    softmax(bias): values 10, 100, 200 with probabilities 0.5, 0.3, 0.2.
    The frequencies of the draws match softmax(bias / T)."""
    model = _model("categorical", "local_2d", seed=8)
    head = model.get_layer("pixel_head")
    probabilities = np.full(256, 1e-12)
    probabilities[[10, 100, 200]] = [0.5, 0.3, 0.2]
    head.kernel.assign(np.zeros(head.kernel.shape, "float32"))
    head.bias.assign(np.log(probabilities).astype("float32"))
    draws = sample_images(model, 100, temperature=temperature, seed=9)
    sharpened = probabilities ** (1.0 / temperature)
    sharpened /= sharpened.sum()
    frequencies = np.bincount(draws.ravel(), minlength=256) / draws.size
    np.testing.assert_allclose(
        frequencies[[10, 100, 200]], sharpened[[10, 100, 200]], atol=0.03
    )
    assert np.isin(draws, [10, 100, 200]).all()


def test_class_conditional_completion() -> None:
    model = _model("dmol", "local_2d", seed=10, num_classes=3)
    images = _images(2)
    labels = np.array([0, 2])
    completed = complete_images(model, images, 2, seed=1, labels=labels)
    np.testing.assert_array_equal(completed[:, :2], images[:, :2])
    with pytest.raises(ValueError, match="class-conditional"):
        complete_images(model, images, 2)


@pytest.mark.parametrize(
    ("images", "kwargs", "match"),
    [
        (np.zeros((1, 4, 4, 3), "float32"), {}, r"images.dtype=float32.*Quantize"),
        (np.full((1, 4, 4, 3), 256, "int32"), {}, r"to 256 in images"),
        (-np.ones((1, 4, 4, 3), "int32"), {}, r"from -1"),
        (np.zeros((1, 8, 8, 3), "int32"), {}, r"images.shape=\(1, 8, 8, 3\)"),
        (np.zeros((4, 4, 3), "int32"), {}, r"images\[None\]"),
        (
            np.zeros((1, 4, 4, 3), "int32"),
            {"given_rows": 5},
            r"given_rows=5.*given_rows=2",
        ),
        (np.zeros((1, 4, 4, 3), "int32"), {"given_rows": -1}, r"given_rows=-1"),
        (np.zeros((1, 4, 4, 3), "int32"), {"temperature": -0.5}, r"temperature=-0.5"),
        (np.zeros((1, 4, 4, 3), "int32"), {"labels": [1]}, r"without classes"),
    ],
)
def test_bad_input_raises_naming_the_argument(
    images: np.ndarray, kwargs: dict, match: str
) -> None:
    model = _model("categorical", "local_2d", seed=12)
    arguments = {"given_rows": 2, **kwargs}
    with pytest.raises(ValueError, match=match):
        complete_images(model, images, **arguments)


def test_sample_images_checks_the_count() -> None:
    with pytest.raises(ValueError, match="num_images=0"):
        sample_images(_model("dmol", "full"), 0)


def test_attention_kinds_are_all_sampled() -> None:
    assert {attention for _, attention in CASES} == set(ATTENTION)


def test_complete_tensor_in_a_graph_draws_what_complete_draws() -> None:
    """What the image SavedModel runs: the same search on symbolic tensors,
    the same draws for the same seed, the given rows kept."""
    model = _model("dmol", "local_2d", seed=17, num_classes=3)
    sampler = ImageSampler(model)
    images, labels = _images(), np.array([0, 1, 2])

    @tf.function
    def complete(images, seed, labels):  # noqa: ANN001, ANN202
        return sampler.complete_tensor(images, 2, 1.0, seed, labels)

    in_graph = complete(
        tf.constant(images), tf.constant(7, tf.int64), tf.constant(labels)
    ).numpy()
    eager = ImageSampler(model).complete(images, 2, 1.0, seed=7, labels=labels)
    np.testing.assert_array_equal(in_graph, eager)
    np.testing.assert_array_equal(in_graph[:, :2], images[:, :2])


# Compiled with XLA (about 30 s), a slow test; the same steps run eagerly
# (about 1 s) with the default tests.
@pytest.mark.parametrize(
    "xla", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["eager", "xla"]
)
def test_the_in_place_cache_rewrite_changes_nothing(xla: bool) -> None:
    """The DMOL step that rewrites the caches it keeps in place
    (`jit_compile=True`, what `ImageSampler(jit_compile=True)` passes) gives
    the same log-probabilities and caches as the plain pass-through, run
    eagerly and compiled with XLA (where the rewrite is an update XLA does
    in place)."""
    model = _model("dmol", "local_2d", seed=18)
    stack = ImageTransformerStack.of(model)
    images = _images(seed=19)
    # The first two pixels, in generation order.
    order = np.asarray(stack.generation_positions)
    tokens = images.reshape(3, -1, 3)[:, order[:2]].reshape(3, 6)

    def steps(in_place: bool) -> tuple[np.ndarray, list]:
        def run(tokens):  # noqa: ANN001, ANN202
            step_fn, state = image_search_step(stack, 3, jit_compile=in_place)
            log_probs, token = [], tf.zeros((3,), tf.int32)
            for index in range(6):
                scores, state = step_fn(token, state, tf.constant(index))
                log_probs.append(scores)
                token = tokens[:, index]
            return tf.stack(log_probs), state["caches"]

        if xla:
            run = tf.function(run, jit_compile=True)
        log_probs, caches = run(tf.constant(tokens))
        return log_probs.numpy(), tf.nest.map_structure(np.asarray, caches)

    (log_probs, caches), (plain, plain_caches) = steps(True), steps(False)
    np.testing.assert_array_equal(log_probs, plain)
    tf.nest.map_structure(np.testing.assert_array_equal, caches, plain_caches)
    # The second pixel's keys are written (the caches start at zero).
    assert all(np.any(cache["keys"] != 0) for cache in caches)
    if xla:
        # The XLA sampler's search (its random stream differs from the graph's).
        compiled = ImageSampler(model, jit_compile=True).complete(images, 2, seed=5)
        np.testing.assert_array_equal(compiled[:, :2], images[:, :2])
        assert not np.array_equal(compiled, images)

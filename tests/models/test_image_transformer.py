"""Tests of the Image Transformer model: config, builder, causality, cached step."""

from __future__ import annotations

import math
from pathlib import Path

import keras
import numpy as np
import pytest

import keras_transformer as kt
from keras_transformer.layers.local_attention_2d import GENERATION_ORDERS
from keras_transformer.models import (
    ImageTransformerConfig,
    ImageTransformerStack,
    build_image_transformer,
    image_bits_per_dim,
)

ATTENTION = {
    "full": {},
    "local_1d": {"query_block_length": 8, "memory_length": 8},
    "local_2d": {"query_block": (2, 2), "memory_flange": (1, 1)},
}


def tiny_config(output: str = "categorical", attention: str = "local_2d", **changes):
    """A 4 x 4 RGB model with blocks that tile both layouts."""
    values = {
        "image_shape": (4, 4, 3),
        "output": output,
        "attention": attention,
        "num_layers": 2,
        "d_model": 16,
        "d_ff": 32,
        "num_heads": 2,
        "num_mixtures": 2,
        "dropout": 0.0,
        **ATTENTION[attention],
    }
    if attention == "local_2d" and output == "categorical":
        values.update(query_block=(2, 6), memory_flange=(1, 3))
    values.update(changes)
    return ImageTransformerConfig(**values)


def _numpy(x: object) -> np.ndarray:
    return np.asarray(keras.ops.convert_to_numpy(x))


def _images(batch: int = 2, seed: int = 0, shape=(4, 4, 3)) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (batch, *shape)).astype("int32")


def _raster(values: np.ndarray, categorical: bool) -> np.ndarray:
    """`(batch, n[, C])` values in raster order, channels innermost."""
    batch, channels = values.shape[0], values.shape[-1]
    return (
        values.reshape(batch, -1)
        if categorical
        else values.reshape(batch, -1, channels)
    )


# ------------------------------------------------------------------ config
def test_config_defaults_are_the_paper_model_and_round_trip() -> None:
    config = ImageTransformerConfig()
    assert (config.num_layers, config.d_model, config.num_heads) == (12, 512, 8)
    assert config.grid_shape == (32, 32) and config.positions == "pixel"
    categorical = config.replace(output="categorical")
    assert categorical.grid_shape == (32, 96) and categorical.num_positions == 3072
    assert ImageTransformerConfig.from_json(config.to_json()) == config
    assert kt.models.image_presets["small"].num_layers == 4
    # The paper's order (§3.2) for new configs and presets.
    assert config.generation_order == "blocks"
    assert kt.models.image_presets["small"].generation_order == "blocks"
    assert config.generation_query_block == (8, 8)
    assert config.replace(generation_order="image").generation_query_block is None
    assert config.replace(attention="full").generation_query_block is None


def test_a_dict_without_the_order_gets_the_papers_and_a_stored_one_is_kept() -> None:
    """from_dict fills a missing `generation_order` with the paper's block
    order (§3.2), as the dataclass does; a stored order is kept."""
    stored = ImageTransformerConfig().to_dict()
    del stored["generation_order"]
    assert ImageTransformerConfig.from_dict(stored) == ImageTransformerConfig()
    assert ImageTransformerConfig().generation_order == "blocks"
    for order in GENERATION_ORDERS:
        config = ImageTransformerConfig(generation_order=order)
        assert ImageTransformerConfig.from_json(config.to_json()) == config


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"image_shape": (32, 32)}, r"image_shape=\(32, 32\)"),
        ({"output": "logistic"}, r"output='logistic'"),
        ({"attention": "local"}, r"attention='local'"),
        ({"d_model": 30}, r"d_model=30.*d_model=28"),
        ({"num_layers": 0}, r"num_layers=0"),
        ({"dropout": 1.0}, r"dropout=1.0"),
        ({"num_classes": 0}, r"num_classes=0"),
        ({"generation_order": "rows"}, r"generation_order='rows'"),
        # Blocks that do not tile the 32 x 32 pixel grid, or larger than it.
        ({"query_block": (8, 12)}, r"32 columns.*query_block=\(8, 12\).*\(8, 8\)"),
        ({"query_block": (64, 8)}, r"larger than.*query_block=\(32, 8\)"),
        (
            {"attention": "local_1d", "query_block_length": 300},
            r"query_block_length=300.*Pad the image to 1200.*query_block_length=256",
        ),
        (
            {"attention": "local_1d", "query_block_length": 2048},
            r"larger than the image's 1024 positions",
        ),
    ],
)
def test_bad_configs_name_the_argument_its_value_and_a_fix(
    changes: dict, match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        ImageTransformerConfig(**changes)


def test_channel_wise_positions_check_blocks_against_width_times_channels() -> None:
    # (8, 8) tiles the 32 x 32 pixel grid and the 32 x 96 channel grid,
    # (8, 24) only the latter.
    ImageTransformerConfig(output="categorical", query_block=(8, 24))
    with pytest.raises(ValueError, match=r"query_block=\(8, 24\)"):
        ImageTransformerConfig(output="dmol", query_block=(8, 24))


# ----------------------------------------------------------------- builder
@pytest.mark.parametrize(
    ("output", "shape"), [("categorical", (2, 4, 4, 3, 256)), ("dmol", (2, 4, 4, 20))]
)
def test_builder_output_shapes(output: str, shape: tuple) -> None:
    model = build_image_transformer(tiny_config(output))
    outputs = model(_images())
    assert tuple(outputs.shape) == shape
    assert keras.backend.standardize_dtype(outputs.dtype) == "float32"
    assert model.get_layer("image_block_1") is not None


def test_untrained_categorical_model_is_near_eight_bits() -> None:
    """Uniform logits give exactly 8 bits/dim; an untrained model is close."""
    keras.utils.set_random_seed(0)
    model = build_image_transformer(tiny_config("categorical"))
    bits = image_bits_per_dim(model, _images(4))
    assert 7.0 < bits < 10.0


def test_bits_per_dim_matches_a_numpy_reference() -> None:
    keras.utils.set_random_seed(0)
    model = build_image_transformer(tiny_config("categorical"))
    images = _images(5, seed=3)
    logits = _numpy(model(images)).astype("float64")
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    nll = -np.take_along_axis(log_probs, images[..., None], -1)
    expected = nll.mean() / math.log(2.0)
    # Batches of 2, 2 and 1: the mean is over all intensities all the same.
    assert image_bits_per_dim(model, images, batch_size=2) == pytest.approx(
        expected, rel=1e-5
    )


@pytest.mark.parametrize("order", GENERATION_ORDERS)
@pytest.mark.parametrize("output", ["categorical", "dmol"])
@pytest.mark.parametrize("attention", sorted(ATTENTION))
def test_outputs_never_see_the_predicted_position_or_later(
    output: str, attention: str, order: str
) -> None:
    """Changing the intensity generated at step t changes no output of the
    steps up to t, in the image's layout; the output of step t + 1 sees it."""
    keras.utils.set_random_seed(4)
    config = tiny_config(output, attention, generation_order=order)
    model = build_image_transformer(config)
    categorical = output == "categorical"
    images = _images()
    # (n,): the raster positions in generation order.
    steps = ImageTransformerStack.of(model).generation_positions
    if attention == "local_2d" and order == "blocks":
        assert steps.tolist() != list(range(config.num_positions))
    before = _raster(_numpy(model(images)), categorical=False)
    flat_before = before.reshape(2, config.num_positions, -1)[:, steps]
    for step in (0, 7, config.num_positions - 2):
        changed = _raster(images.copy(), categorical)
        position = steps[step]
        changed[:, position] = (changed[:, position] + 128) % 256
        after = _numpy(model(changed.reshape(images.shape)))
        flat_after = after.reshape(2, config.num_positions, -1)[:, steps]
        np.testing.assert_allclose(
            flat_after[:, : step + 1], flat_before[:, : step + 1], atol=1e-5
        )
        # The next step does see it.
        assert not np.allclose(flat_after[:, step + 1], flat_before[:, step + 1])


@pytest.mark.parametrize("order", GENERATION_ORDERS)
@pytest.mark.parametrize("output", ["categorical", "dmol"])
@pytest.mark.parametrize("attention", sorted(ATTENTION))
def test_cached_step_equals_the_full_forward_pass(
    output: str, attention: str, order: str
) -> None:
    """Fed in its generation order, the cached step gives the forward pass's
    distribution at every position; in the "image" order with multi-query
    attention (one key/value head, Ainslie et al., 2023), in the "blocks"
    order with multi-head attention."""
    keras.utils.set_random_seed(5)
    config = tiny_config(
        output,
        attention,
        num_classes=3,
        norm_first=True,
        generation_order=order,
        attention_settings={"num_key_value_heads": 1 if order == "image" else None},
    )
    model = build_image_transformer(config)
    images, labels = _images(), np.array([2, 0])
    full = _numpy(model({"images": images, "labels": labels}))
    full = full.reshape(2, config.num_positions, -1)
    stack = ImageTransformerStack.of(model)
    values = _raster(images, output == "categorical")
    caches = stack.init_cache(2)
    steps = stack.generation_positions.tolist()
    for step, index in enumerate(steps):
        previous = values[:, steps[max(step - 1, 0)]]
        outputs, caches = stack.decode_beam_step(
            previous[:, None], caches, index, labels
        )
        np.testing.assert_allclose(_numpy(outputs)[:, 0], full[:, index], atol=5e-5)


def test_decode_beam_step_takes_one_hypothesis_per_image() -> None:
    keras.utils.set_random_seed(5)
    model = build_image_transformer(tiny_config("dmol", "local_2d"))
    stack = ImageTransformerStack.of(model)
    values = _raster(_images(), categorical=False)
    _, caches = stack.decode_beam_step(values[:, :1], stack.init_cache(2), 1)
    assert len(caches) == len(stack.blocks)
    with pytest.raises(ValueError, match=r"one hypothesis per image.*\(2, 2, 3\)"):
        stack.decode_beam_step(np.zeros((2, 2, 3), "int32"), stack.init_cache(2), 0)


def test_local_2d_blocks_covering_the_image_equal_full_attention() -> None:
    keras.utils.set_random_seed(6)
    full = build_image_transformer(tiny_config("dmol", "full"))
    local = build_image_transformer(
        tiny_config("dmol", "local_2d", query_block=(4, 4), memory_flange=(0, 0))
    )
    local.set_weights(full.get_weights())
    images = _images()
    np.testing.assert_allclose(_numpy(local(images)), _numpy(full(images)), atol=1e-5)
    narrow = build_image_transformer(tiny_config("dmol", "local_2d"))
    narrow.set_weights(full.get_weights())
    assert not np.allclose(_numpy(narrow(images)), _numpy(full(images)), atol=1e-3)


def test_class_conditioning_changes_the_outputs() -> None:
    keras.utils.set_random_seed(7)
    model = build_image_transformer(tiny_config("dmol", num_classes=4))
    images = np.repeat(_images(1), 2, axis=0)
    out = _numpy(model({"images": images, "labels": np.array([0, 3])}))
    assert not np.allclose(out[0], out[1])
    with pytest.raises(ValueError, match="pass `labels`"):
        ImageTransformerStack.of(model).forward(images)


@pytest.mark.parametrize(
    ("attention", "order"),
    [("local_1d", "blocks"), ("local_2d", "blocks"), ("local_2d", "image")],
)
def test_save_and_load_keep_the_outputs(
    tmp_path: Path, attention: str, order: str
) -> None:
    keras.utils.set_random_seed(8)
    model = build_image_transformer(
        tiny_config("categorical", attention, generation_order=order)
    )
    images = _images()
    path = tmp_path / "image_transformer.keras"
    model.save(path)
    restored = keras.models.load_model(path)
    np.testing.assert_allclose(
        _numpy(restored(images)), _numpy(model(images)), atol=1e-6
    )
    stack = ImageTransformerStack.of(restored)
    assert stack.categorical and len(stack.blocks) == 2
    np.testing.assert_array_equal(
        stack.generation_positions, ImageTransformerStack.of(model).generation_positions
    )


def test_the_two_orders_are_two_models_with_the_same_weights() -> None:
    """Same weights, other factorization: the outputs differ, and the
    whole-image order is the model the layers build when given no order
    (what a model saved before the setting existed loads as)."""
    keras.utils.set_random_seed(10)
    blocks = build_image_transformer(tiny_config("dmol"))
    image = build_image_transformer(tiny_config("dmol", generation_order="image"))
    image.set_weights(blocks.get_weights())
    images = _images()
    assert not np.allclose(_numpy(blocks(images)), _numpy(image(images)), atol=1e-4)
    old = {layer.name: layer.get_config() for layer in image.layers}
    for name in ("image_block_0", "image_block_1"):
        del old[name]["generation_order"]
        restored = type(image.get_layer(name)).from_config(old[name])
        assert restored.generation_order == "image"
    assert old["image_embedding"]["query_block"] is None


def test_one_fit_step_trains(tmp_path: Path) -> None:
    keras.utils.set_random_seed(9)
    model = build_image_transformer(tiny_config("dmol"))
    stack = ImageTransformerStack.of(model)
    images = _images(4)
    before = image_bits_per_dim(model, images)
    optimizer = kt.optimizers.Adam(1e-2)
    model.compile(
        optimizer=optimizer,
        loss=lambda target, params: stack.head.bits_per_dim(
            params, keras.ops.cast(target, "int32")
        ),
    )
    # Slots built before fit, not inside its first traced step (which
    # Keras would then trace twice): the same updates, about 5 s sooner.
    optimizer.build(model.trainable_variables)
    model.fit(images, images, epochs=10, batch_size=4, verbose=0)
    assert image_bits_per_dim(model, images) < before


def test_builder_rejects_other_configs() -> None:
    with pytest.raises(TypeError, match="ImageTransformerConfig"):
        build_image_transformer(kt.models.TransformerConfig())
    with pytest.raises(ValueError, match="build_image_transformer"):
        ImageTransformerStack.of(keras.Sequential([keras.layers.Dense(2)]))

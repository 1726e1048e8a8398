"""Tests of the Image Transformer's input embedding and decoder block (§3)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import keras
import numpy as np
import pytest

from keras_transformer.layers import ImageEmbedding, ImageTransformerBlock
from keras_transformer.layers.image_embedding import grid_position_encoding
from keras_transformer.layers.local_attention import LocalBlockAttention
from keras_transformer.layers.local_attention_2d import (
    GENERATION_ORDERS,
    generation_positions,
)
from keras_transformer.layers.position import sinusoidal_encoding
from tests.layer_testing import run_layer_test

HEIGHT, WIDTH, CHANNELS, D_MODEL = 4, 4, 3, 8


def _numpy(x: object) -> np.ndarray:
    return np.asarray(keras.ops.convert_to_numpy(x))


def _images(batch: int = 2, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (batch, HEIGHT, WIDTH, CHANNELS)).astype("int32")


def _shift(embedded: np.ndarray, order: np.ndarray) -> np.ndarray:
    """NumPy reference: `(batch, n, d)` shifted by one step of `order` (the
    raster positions in generation order), zeros at the first."""
    in_order = embedded[:, order]
    shifted = np.concatenate([np.zeros_like(in_order[:, :1]), in_order[:, :-1]], 1)
    result = np.empty_like(shifted)
    result[:, order] = shifted
    return result


#: Query blocks of the block generation order, in positions (None: the
#: whole-image raster order). (2, 4) on the 4 x 12 channel grid cuts pixels
#: across blocks, so the channel of a predecessor is not `(p - 1) % 3`.
CHANNEL_BLOCKS = [None, (2, 4), (2, 6)]
PIXEL_BLOCKS = [None, (2, 2)]


# --------------------------------------------------------------- embedding
def test_grid_position_encoding_halves_are_row_and_column_sinusoids() -> None:
    codes = _numpy(grid_position_encoding(3, 5, 8))
    rows = _numpy(sinusoidal_encoding(np.arange(3), 4))
    cols = _numpy(sinusoidal_encoding(np.arange(5), 4))
    assert codes.shape == (3, 5, 8)
    np.testing.assert_allclose(codes[2, 4, :4], rows[2], atol=1e-6)
    np.testing.assert_allclose(codes[2, 4, 4:], cols[4], atol=1e-6)
    # A hand-checked value: PE(row=1, 0) = sin(1), PE(col=2, 1) = cos(2).
    assert codes[1, 0, 0] == pytest.approx(math.sin(1.0), abs=1e-6)
    assert codes[0, 2, 5] == pytest.approx(math.cos(2.0), abs=1e-6)


@pytest.mark.parametrize("query_block", CHANNEL_BLOCKS)
def test_channel_positions_are_the_shifted_intensity_embeddings(
    query_block: tuple[int, int] | None,
) -> None:
    layer = ImageEmbedding((HEIGHT, WIDTH, CHANNELS), D_MODEL, query_block=query_block)
    images = _images()
    out = _numpy(layer(images))
    assert out.shape == (2, HEIGHT, WIDTH * CHANNELS, D_MODEL)
    table = _numpy(layer.intensity_embeddings) * math.sqrt(D_MODEL)
    codes = _numpy(grid_position_encoding(HEIGHT, WIDTH * CHANNELS, D_MODEL))
    # NumPy reference: raster layout, channels innermost, shifted by one
    # step of the generation order.
    flat = images.reshape(2, -1)
    channel = np.tile(np.arange(CHANNELS), HEIGHT * WIDTH)
    embedded = table[channel[None] * 256 + flat]  # (batch, n, d)
    order = generation_positions(HEIGHT, WIDTH * CHANNELS, query_block)
    shifted = _shift(embedded, order)
    expected = shifted.reshape(out.shape) + codes[None]
    np.testing.assert_allclose(out, expected, atol=1e-5)


@pytest.mark.parametrize("query_block", PIXEL_BLOCKS)
def test_pixel_positions_map_the_scaled_intensities(
    query_block: tuple[int, int] | None,
) -> None:
    layer = ImageEmbedding(
        (HEIGHT, WIDTH, CHANNELS), D_MODEL, positions="pixel", query_block=query_block
    )
    images = _images()
    out = _numpy(layer(images))
    assert out.shape == (2, HEIGHT, WIDTH, D_MODEL)
    assert [w.name for w in layer.weights] == ["pixel_kernel", "pixel_bias"]
    kernel, bias = _numpy(layer.pixel_kernel), _numpy(layer.pixel_bias)
    # The 1x3 strided convolution on intensities scaled to [-1, 1].
    pixels = (images.reshape(2, -1, CHANNELS) / 127.5 - 1.0) @ kernel + bias
    shifted = _shift(pixels, generation_positions(HEIGHT, WIDTH, query_block))
    codes = _numpy(grid_position_encoding(HEIGHT, WIDTH, D_MODEL))
    np.testing.assert_allclose(out, shifted.reshape(out.shape) + codes[None], atol=1e-4)


@pytest.mark.parametrize(
    ("positions", "query_block"),
    [("channel", block) for block in CHANNEL_BLOCKS]
    + [("pixel", block) for block in PIXEL_BLOCKS],
)
def test_embed_step_equals_the_position_of_the_full_call(
    positions: str, query_block: tuple[int, int] | None
) -> None:
    layer = ImageEmbedding(
        (HEIGHT, WIDTH, CHANNELS),
        D_MODEL,
        positions=positions,
        num_classes=5,
        query_block=query_block,
    )
    images, labels = _images(), np.array([1, 4])
    full = _numpy(layer(images, labels))
    rows, cols = layer.grid_shape
    flat = full.reshape(2, rows * cols, D_MODEL)
    values = (
        images.reshape(2, -1)
        if positions == "channel"
        else images.reshape(2, -1, CHANNELS)
    )
    order = generation_positions(rows, cols, query_block)
    for step in (0, 1, 2, 5, 13, rows * cols - 1):
        index, previous = order[step], order[max(step - 1, 0)]
        embedded = _numpy(layer.embed_step(values[:, previous], index, labels))
        np.testing.assert_allclose(embedded[:, 0], flat[:, index], atol=1e-5)


def test_class_embedding_is_added_everywhere() -> None:
    layer = ImageEmbedding((HEIGHT, WIDTH, CHANNELS), D_MODEL, num_classes=3)
    images = np.repeat(_images(1), 2, axis=0)
    out = _numpy(layer(images, np.array([0, 2])))
    table = _numpy(layer.class_embeddings) * math.sqrt(D_MODEL)
    np.testing.assert_allclose(
        out[1] - out[0], np.broadcast_to(table[2] - table[0], out[0].shape), atol=1e-5
    )


@pytest.mark.parametrize("query_block", [None, (1, 3)])
def test_embedding_config_round_trip(query_block: tuple[int, int] | None) -> None:
    layer = ImageEmbedding(
        (2, 3, 1), 12, positions="pixel", num_classes=4, query_block=query_block
    )
    config = layer.get_config()
    clone = ImageEmbedding.from_config(config)
    assert json.dumps(clone.get_config(), sort_keys=True) == json.dumps(
        config, sort_keys=True
    )
    assert clone.grid_shape == (2, 3) and clone.query_block == query_block
    # A layer saved before the setting existed shifts in raster order.
    del config["query_block"]
    assert ImageEmbedding.from_config(config).query_block is None


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"image_shape": (4, 4), "d_model": 8}, "image_shape"),
        ({"image_shape": (4, 0, 3), "d_model": 8}, "image_shape"),
        ({"image_shape": (4, 4, 3), "d_model": 10}, "d_model=10.*d_model=8"),
        ({"image_shape": (4, 4, 3), "d_model": 8, "positions": "row"}, "positions"),
        ({"image_shape": (4, 4, 3), "d_model": 8, "num_classes": 0}, "num_classes"),
        (
            {"image_shape": (4, 4, 3), "d_model": 8, "query_block": (3, 6)},
            r"query_block=\(3, 6\).*query_block=\(2, 6\)",
        ),
    ],
)
def test_bad_embedding_arguments_raise(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ImageEmbedding(**kwargs)


def test_bad_images_raise_naming_the_argument() -> None:
    layer = ImageEmbedding((HEIGHT, WIDTH, CHANNELS), D_MODEL)
    with pytest.raises(ValueError, match=r"images.dtype=float32.*Quantize"):
        layer(_images().astype("float32") / 255.0)
    too_bright, negative = _images(), _images()
    too_bright[0, 1, 2, 0], negative[1, 0, 0, 2] = 300, -1
    with pytest.raises(ValueError, match=r"to 300 in images.*8 bits"):
        layer(too_bright)
    with pytest.raises(ValueError, match=r"from -1 to"):
        layer(negative)
    with pytest.raises(ValueError, match=r"images.shape=\(2, 4, 5, 3\)"):
        layer(np.zeros((2, 4, 5, 3), "int32"))


def test_labels_must_match_the_conditioning() -> None:
    plain = ImageEmbedding((HEIGHT, WIDTH, CHANNELS), D_MODEL)
    with pytest.raises(ValueError, match="without classes"):
        plain(_images(), np.array([0, 1]))
    conditional = ImageEmbedding((HEIGHT, WIDTH, CHANNELS), D_MODEL, num_classes=3)
    with pytest.raises(ValueError, match="pass `labels`"):
        conditional(_images())
    with pytest.raises(ValueError, match=r"classes in \[0, 3\).*from 0 to 3"):
        conditional(_images(), np.array([0, 3]))


# ------------------------------------------------------------------- block
BLOCK_KWARGS = {
    "full": {},
    "local_1d": {"query_block_length": 6, "memory_length": 6},
    "local_2d": {"query_block": (2, 6), "memory_flange": (1, 3)},
}


def _grid(seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.normal(size=(2, HEIGHT, WIDTH * CHANNELS, 16)).astype("float32")


def _block_order(block: ImageTransformerBlock) -> np.ndarray:
    """The raster positions of the block's grid in its generation order."""
    blocks = block.query_block if block.attention == "local_2d" else None
    return generation_positions(*block.grid_shape, blocks, block.generation_order)


@pytest.mark.parametrize("order", GENERATION_ORDERS)
def test_block_contract(tmp_path: Path, order: str) -> None:
    run_layer_test(
        ImageTransformerBlock,
        {
            "num_heads": 2,
            "d_ff": 32,
            "attention": "local_2d",
            "dropout": 0.0,
            "query_block": (2, 6),
            "memory_flange": (1, 3),
            "generation_order": order,
        },
        [_grid()],
        (2, HEIGHT, WIDTH * CHANNELS, 16),
        tmp_path,
    )


@pytest.mark.parametrize("order", GENERATION_ORDERS)
@pytest.mark.parametrize("attention", sorted(BLOCK_KWARGS))
@pytest.mark.parametrize("norm_first", [False, True])
def test_block_cached_positions_equal_the_full_block(
    attention: str, norm_first: bool, order: str
) -> None:
    keras.utils.set_random_seed(1)
    block = ImageTransformerBlock(
        num_heads=2,
        d_ff=32,
        attention=attention,
        norm_first=norm_first,
        generation_order=order,
        **BLOCK_KWARGS[attention],
    )
    x = _grid()
    full = _numpy(block(x)).reshape(2, -1, 16)
    sequence = x.reshape(2, -1, 16)
    cache = block.init_cache(2)
    for index in _block_order(block).tolist():
        position = sequence[:, index : index + 1]
        output, cache = block(position, cache=cache, cache_update_index=index)
        np.testing.assert_allclose(_numpy(output)[:, 0], full[:, index], atol=2e-5)


def test_block_cache_holds_keys_and_values_and_needs_a_cache_index() -> None:
    keras.utils.set_random_seed(1)
    block = ImageTransformerBlock(
        num_heads=2, d_ff=32, attention="local_2d", **BLOCK_KWARGS["local_2d"]
    )
    x = _grid()
    block(x)
    position = x.reshape(2, -1, 16)[:, :1]
    _, cache = block(position, cache=block.init_cache(2), cache_update_index=0)
    assert set(cache) == {"keys", "values"}
    with pytest.raises(ValueError, match="without a cache"):
        block(x, cache_update_index=0)


@pytest.mark.parametrize("order", GENERATION_ORDERS)
@pytest.mark.parametrize("attention", sorted(BLOCK_KWARGS))
def test_block_is_causal_in_its_generation_order(attention: str, order: str) -> None:
    """Changing the inputs from step 20 of the generation order on (raster
    order but for local 2D attention in the block order) changes no output
    before that step."""
    keras.utils.set_random_seed(2)
    block = ImageTransformerBlock(
        num_heads=2,
        d_ff=32,
        attention=attention,
        generation_order=order,
        **BLOCK_KWARGS[attention],
    )
    x = _grid()
    before = _numpy(block(x)).reshape(2, -1, 16)
    steps = _block_order(block)
    if attention != "local_2d" or order == "image":
        np.testing.assert_array_equal(steps, np.arange(len(steps)))
    changed = x.copy().reshape(2, -1, 16)
    step = 20
    changed[:, steps[step:]] += 5.0
    after = _numpy(block(changed.reshape(x.shape))).reshape(2, -1, 16)
    earlier, first = steps[:step], steps[step]
    np.testing.assert_allclose(after[:, earlier], before[:, earlier], atol=1e-5)
    assert not np.allclose(after[:, first], before[:, first])


def test_a_saved_block_without_the_order_loads_with_the_raster_order() -> None:
    block = ImageTransformerBlock(num_heads=2, d_ff=8, **BLOCK_KWARGS["local_2d"])
    config = block.get_config()
    assert config["generation_order"] == "blocks"
    del config["generation_order"]
    restored = ImageTransformerBlock.from_config(config)
    assert restored.generation_order == "image"
    restored(_grid())
    assert restored.self_attention.generation_order == "image"


def test_block_local_1d_attention_equals_local_block_attention() -> None:
    keras.utils.set_random_seed(3)
    block = ImageTransformerBlock(
        num_heads=2,
        d_ff=32,
        attention="local_1d",
        query_block_length=6,
        memory_length=12,
    )
    block(_grid())
    assert isinstance(block.self_attention, LocalBlockAttention)
    assert block.self_attention.memory_length == 12


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"attention": "dense"}, "attention"),
        ({"query_block": (0, 2)}, "query_block"),
        ({"memory_flange": (-1, 2)}, "memory_flange"),
        ({"query_block_length": 0}, "query_block_length"),
        ({"memory_length": -1}, "memory_length=-1"),
        ({"generation_order": "rows"}, "generation_order='rows'"),
        ({"attention_settings": {"window": 4}}, "not attention_settings.window"),
    ],
)
def test_bad_block_arguments_raise(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ImageTransformerBlock(num_heads=2, d_ff=8, **kwargs)


def test_block_sizes_that_do_not_tile_the_image_raise() -> None:
    block = ImageTransformerBlock(
        num_heads=2, d_ff=8, attention="local_2d", query_block=(3, 6)
    )
    with pytest.raises(ValueError, match=r"query_block=\(3, 6\).*query_block=\(2, 6\)"):
        block(_grid())
    block = ImageTransformerBlock(
        num_heads=2, d_ff=8, attention="local_1d", query_block_length=7
    )
    with pytest.raises(ValueError, match=r"query_block_length=7.*query_block_length=6"):
        block(_grid())
    block = ImageTransformerBlock(
        num_heads=2, d_ff=8, attention="local_1d", query_block_length=64
    )
    with pytest.raises(ValueError, match=r"larger than the image's 48 positions"):
        block(_grid())

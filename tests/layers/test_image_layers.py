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
from keras_transformer.layers.position import sinusoidal_encoding
from tests.layer_testing import run_layer_test

HEIGHT, WIDTH, CHANNELS, D_MODEL = 4, 4, 3, 8


def _numpy(x: object) -> np.ndarray:
    return np.asarray(keras.ops.convert_to_numpy(x))


def _images(batch: int = 2, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (batch, HEIGHT, WIDTH, CHANNELS)).astype("int32")


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


def test_channel_positions_are_the_shifted_intensity_embeddings() -> None:
    layer = ImageEmbedding((HEIGHT, WIDTH, CHANNELS), D_MODEL)
    images = _images()
    out = _numpy(layer(images))
    assert out.shape == (2, HEIGHT, WIDTH * CHANNELS, D_MODEL)
    table = _numpy(layer.intensity_embeddings) * math.sqrt(D_MODEL)
    codes = _numpy(grid_position_encoding(HEIGHT, WIDTH * CHANNELS, D_MODEL))
    # NumPy reference: raster order, channels innermost, shifted by one.
    flat = images.reshape(2, -1)
    channel = np.tile(np.arange(CHANNELS), HEIGHT * WIDTH)
    embedded = table[channel[None] * 256 + flat]  # (batch, n, d)
    shifted = np.concatenate([np.zeros_like(embedded[:, :1]), embedded[:, :-1]], 1)
    expected = shifted.reshape(out.shape) + codes[None]
    np.testing.assert_allclose(out, expected, atol=1e-5)


def test_pixel_positions_map_the_scaled_intensities() -> None:
    layer = ImageEmbedding((HEIGHT, WIDTH, CHANNELS), D_MODEL, positions="pixel")
    images = _images()
    out = _numpy(layer(images))
    assert out.shape == (2, HEIGHT, WIDTH, D_MODEL)
    assert [w.name for w in layer.weights] == ["pixel_kernel", "pixel_bias"]
    kernel, bias = _numpy(layer.pixel_kernel), _numpy(layer.pixel_bias)
    # The 1x3 strided convolution on intensities scaled to [-1, 1].
    pixels = (images.reshape(2, -1, CHANNELS) / 127.5 - 1.0) @ kernel + bias
    shifted = np.concatenate([np.zeros_like(pixels[:, :1]), pixels[:, :-1]], 1)
    codes = _numpy(grid_position_encoding(HEIGHT, WIDTH, D_MODEL))
    np.testing.assert_allclose(out, shifted.reshape(out.shape) + codes[None], atol=1e-4)


@pytest.mark.parametrize("positions", ["channel", "pixel"])
def test_embed_step_equals_the_position_of_the_full_call(positions: str) -> None:
    layer = ImageEmbedding(
        (HEIGHT, WIDTH, CHANNELS), D_MODEL, positions=positions, num_classes=5
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
    for index in (0, 1, 2, 5, rows * cols - 1):
        step = _numpy(layer.embed_step(values[:, max(index - 1, 0)], index, labels))
        np.testing.assert_allclose(step[:, 0], flat[:, index], atol=1e-5)


def test_class_embedding_is_added_everywhere() -> None:
    layer = ImageEmbedding((HEIGHT, WIDTH, CHANNELS), D_MODEL, num_classes=3)
    images = np.repeat(_images(1), 2, axis=0)
    out = _numpy(layer(images, np.array([0, 2])))
    table = _numpy(layer.class_embeddings) * math.sqrt(D_MODEL)
    np.testing.assert_allclose(
        out[1] - out[0], np.broadcast_to(table[2] - table[0], out[0].shape), atol=1e-5
    )


def test_embedding_config_round_trip() -> None:
    layer = ImageEmbedding((2, 3, 1), 12, positions="pixel", num_classes=4)
    config = layer.get_config()
    clone = ImageEmbedding.from_config(config)
    assert json.dumps(clone.get_config(), sort_keys=True) == json.dumps(
        config, sort_keys=True
    )
    assert clone.grid_shape == (2, 3)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"image_shape": (4, 4), "d_model": 8}, "image_shape"),
        ({"image_shape": (4, 0, 3), "d_model": 8}, "image_shape"),
        ({"image_shape": (4, 4, 3), "d_model": 10}, "d_model=10.*d_model=8"),
        ({"image_shape": (4, 4, 3), "d_model": 8, "positions": "row"}, "positions"),
        ({"image_shape": (4, 4, 3), "d_model": 8, "num_classes": 0}, "num_classes"),
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


def test_block_contract(tmp_path: Path) -> None:
    run_layer_test(
        ImageTransformerBlock,
        {
            "num_heads": 2,
            "d_ff": 32,
            "attention": "local_2d",
            "dropout": 0.0,
            "query_block": (2, 6),
            "memory_flange": (1, 3),
        },
        [_grid()],
        (2, HEIGHT, WIDTH * CHANNELS, 16),
        tmp_path,
    )


@pytest.mark.parametrize("attention", sorted(BLOCK_KWARGS))
@pytest.mark.parametrize("norm_first", [False, True])
def test_block_cached_positions_equal_the_full_block(
    attention: str, norm_first: bool
) -> None:
    keras.utils.set_random_seed(1)
    block = ImageTransformerBlock(
        num_heads=2,
        d_ff=32,
        attention=attention,
        norm_first=norm_first,
        **BLOCK_KWARGS[attention],
    )
    x = _grid()
    full = _numpy(block(x)).reshape(2, -1, 16)
    sequence = x.reshape(2, -1, 16)
    cache = block.init_cache(2)
    for index in range(sequence.shape[1]):
        output, cache = block.call_cached(sequence[:, index : index + 1], cache, index)
        np.testing.assert_allclose(_numpy(output)[:, 0], full[:, index], atol=2e-5)


@pytest.mark.parametrize("attention", sorted(BLOCK_KWARGS))
def test_block_is_causal_in_raster_order(attention: str) -> None:
    keras.utils.set_random_seed(2)
    block = ImageTransformerBlock(
        num_heads=2, d_ff=32, attention=attention, **BLOCK_KWARGS[attention]
    )
    x = _grid()
    changed = x.copy().reshape(2, -1, 16)
    position = 20
    changed[:, position:] += 5.0
    before = _numpy(block(x)).reshape(2, -1, 16)
    after = _numpy(block(changed.reshape(x.shape))).reshape(2, -1, 16)
    np.testing.assert_allclose(after[:, :position], before[:, :position], atol=1e-5)
    assert not np.allclose(after[:, position], before[:, position])


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
        ({"memory_length": -1}, "memory_length"),
        ({"attention_window": 4}, "attention_window"),
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

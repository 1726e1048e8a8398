"""Tests of the local 2D block self-attention (Image Transformer, §3.2)."""

from __future__ import annotations

from pathlib import Path

import keras
import numpy as np
import pytest

from keras_transformer.layers import LocalAttention2D, local_2d_attention_mask
from keras_transformer.layers.attention import MultiHeadAttention
from keras_transformer.layers.local_attention import LocalBlockAttention
from tests.layer_testing import run_layer_test

# A 4 x 8 RGB image with channel-wise positions: 4 rows x 24 columns.
BATCH, ROWS, COLS, D_MODEL, HEADS, KEY_DIM = 2, 4, 24, 16, 2, 8


def _image(rows: int = ROWS, cols: int = COLS, seed: int = 0) -> np.ndarray:
    return (
        np.random.default_rng(seed)
        .normal(size=(BATCH, rows, cols, D_MODEL))
        .astype("float32")
    )


def _numpy(x: object) -> np.ndarray:
    return np.asarray(keras.ops.convert_to_numpy(x))


def _close(a: object, b: object, atol: float = 1e-5) -> None:
    np.testing.assert_allclose(_numpy(a), _numpy(b), atol=atol, rtol=1e-5)


def _dense_twin(layer: keras.layers.Layer, x: np.ndarray) -> MultiHeadAttention:
    """A full MultiHeadAttention holding the weights of the built `layer`."""
    layer(x)
    sequence = x.reshape(x.shape[0], -1, x.shape[-1])
    twin = MultiHeadAttention(num_heads=HEADS, key_dim=KEY_DIM)
    twin(sequence, sequence)
    twin.set_weights(layer.get_weights())
    return twin


# ------------------------------------------------------------ the contract
def test_layer_contract(tmp_path: Path) -> None:
    run_layer_test(
        LocalAttention2D,
        {
            "num_heads": HEADS,
            "key_dim": KEY_DIM,
            "query_block": (2, 6),
            "memory_flange": (1, 3),
        },
        [_image()],
        (BATCH, ROWS, COLS, D_MODEL),
        tmp_path,
        call_kwargs={"use_causal_mask": True},
        expected_num_weights=8,
    )


def test_weights_interchangeable_with_multi_head_attention() -> None:
    x = _image()
    layer = LocalAttention2D(HEADS, KEY_DIM, query_block=(2, 6), memory_flange=(1, 3))
    dense = _dense_twin(layer, x)
    assert [w.path.split("/")[-1] for w in layer.weights] == [
        w.path.split("/")[-1] for w in dense.weights
    ]


# ----------------------------------------------- equivalence with the mask
GEOMETRIES = [
    # (rows, cols, query_block, memory_flange)
    (4, 24, (2, 6), (1, 3)),  # the paper's shape: flanges smaller than a block
    (4, 24, (2, 6), (3, 9)),  # flanges wider than a block
    (4, 24, (1, 3), (0, 0)),  # block-diagonal
    (4, 24, (4, 24), (2, 5)),  # one block: flanges outside the image
    (6, 12, (3, 4), (2, 0)),
]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("rows", "cols", "query_block", "memory_flange"), GEOMETRIES)
def test_equals_multi_head_attention_with_dense_mask(
    rows: int,
    cols: int,
    query_block: tuple[int, int],
    memory_flange: tuple[int, int],
    causal: bool,
) -> None:
    x = _image(rows, cols)
    layer = LocalAttention2D(
        HEADS, KEY_DIM, query_block=query_block, memory_flange=memory_flange
    )
    dense = _dense_twin(layer, x)
    sequence = x.reshape(BATCH, rows * cols, D_MODEL)
    mask = local_2d_attention_mask(rows, cols, query_block, memory_flange, causal)
    expected, expected_scores = dense(
        sequence, sequence, attention_mask=mask, return_attention_scores=True
    )
    output, scores = layer(x, use_causal_mask=causal, return_attention_scores=True)
    assert tuple(output.shape) == (BATCH, rows, cols, D_MODEL)
    _close(_numpy(output).reshape(BATCH, rows * cols, D_MODEL), expected)
    _close(layer.blocked_to_dense_scores(scores), expected_scores)
    (h_q, w_q), (h_m, w_m) = query_block, memory_flange
    assert tuple(scores.shape) == (
        BATCH,
        HEADS,
        rows // h_q,
        cols // w_q,
        h_q * w_q,
        (h_m + h_q) * (w_q + 2 * w_m),
    )


def test_dense_mask_pattern_follows_figure_2() -> None:
    # A 4 x 6 grid, query blocks of 2 x 2, flanges of 1 row and 1 column.
    mask = _numpy(local_2d_attention_mask(4, 6, (2, 2), (1, 1))).astype(int)
    # Query (2, 2) lies in the block of rows 2-3, columns 2-3; its memory
    # block is rows 1-3, columns 1-4.
    expected = np.zeros((4, 6), int)
    expected[1:4, 1:5] = 1
    assert mask[2 * 6 + 2].reshape(4, 6).tolist() == expected.tolist()
    causal = _numpy(local_2d_attention_mask(4, 6, (2, 2), (1, 1), causal=True))
    # Causal: row 1 (above) whole, row 2 up to the query itself.
    expected[2, 3:] = 0
    expected[3] = 0
    assert causal.astype(int)[2 * 6 + 2].reshape(4, 6).tolist() == expected.tolist()
    # Every query sees itself.
    assert np.all(np.diag(causal))


def test_local_attention_is_not_full_attention() -> None:
    x = _image()
    layer = LocalAttention2D(HEADS, KEY_DIM, query_block=(1, 6), memory_flange=(1, 3))
    dense = _dense_twin(layer, x)
    sequence = x.reshape(BATCH, ROWS * COLS, D_MODEL)
    full = _numpy(dense(sequence, sequence, use_causal_mask=True))
    local = _numpy(layer(x, use_causal_mask=True)).reshape(full.shape)
    assert np.abs(local - full).max() > 1e-3


# ------------------------------------------------ the 1D local block layer
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("h_q", "h_m", "w_m"), [(1, 1, 0), (1, 2, 0), (2, 1, 5)])
def test_full_width_blocks_equal_local_1d_attention(
    h_q: int, h_m: int, w_m: int, causal: bool
) -> None:
    """query_block=(h_q, cols), memory_flange=(h_m, w_m) is LocalBlockAttention
    with query_block_length=h_q * cols and memory_length=h_m * cols: a block
    of whole rows and the h_m rows above it are the 1D block and its memory
    (the side flanges fall outside the image)."""
    x = _image()
    layer = LocalAttention2D(
        HEADS, KEY_DIM, query_block=(h_q, COLS), memory_flange=(h_m, w_m)
    )
    layer(x)
    sequence = x.reshape(BATCH, ROWS * COLS, D_MODEL)
    local_1d = LocalBlockAttention(
        HEADS, KEY_DIM, query_block_length=h_q * COLS, memory_length=h_m * COLS
    )
    local_1d(sequence)
    local_1d.set_weights(layer.get_weights())
    expected = local_1d(sequence, use_causal_mask=causal)
    output = _numpy(layer(x, use_causal_mask=causal))
    _close(output.reshape(BATCH, ROWS * COLS, D_MODEL), expected)


# -------------------------------------------------------------- causality
@pytest.mark.parametrize(
    ("query_block", "memory_flange"), [((2, 6), (1, 3)), ((2, 6), (2, 12))]
)
def test_causal_outputs_ignore_later_positions(
    query_block: tuple[int, int], memory_flange: tuple[int, int]
) -> None:
    x = _image()
    layer = LocalAttention2D(
        HEADS, KEY_DIM, query_block=query_block, memory_flange=memory_flange
    )
    before = _numpy(layer(x, use_causal_mask=True)).reshape(BATCH, -1, D_MODEL)
    for t in (0, 7, 30, 50, ROWS * COLS - 2):
        changed = x.reshape(BATCH, -1, D_MODEL).copy()
        changed[:, t + 1 :] = _image(seed=t + 1).reshape(BATCH, -1, D_MODEL)[:, t + 1 :]
        after = _numpy(layer(changed.reshape(x.shape), use_causal_mask=True))
        after = after.reshape(BATCH, -1, D_MODEL)
        _close(after[:, : t + 1], before[:, : t + 1], atol=1e-6)
        assert np.abs(after[:, t + 1] - before[:, t + 1]).max() > 1e-4


def test_shifted_inputs_never_see_the_predicted_position() -> None:
    """The mask lets a position see itself (MultiHeadAttention's convention);
    a model feeds position p the embedding of intensity p - 1 (inputs
    shifted right by one raster position), so the output that predicts
    intensity p depends on no intensity at p or later."""
    layer = LocalAttention2D(HEADS, KEY_DIM, query_block=(2, 6), memory_flange=(1, 3))
    embedded = _image().reshape(BATCH, -1, D_MODEL)  # one row per intensity

    def outputs(embedded: np.ndarray) -> np.ndarray:
        start = np.zeros_like(embedded[:, :1])
        shifted = np.concatenate([start, embedded[:, :-1]], axis=1)
        output = layer(
            shifted.reshape(BATCH, ROWS, COLS, D_MODEL), use_causal_mask=True
        )
        return _numpy(output).reshape(BATCH, -1, D_MODEL)

    before = outputs(embedded)
    for t in (0, 29, ROWS * COLS - 2):
        changed = embedded.copy()
        changed[:, t:] = _image(seed=t + 7).reshape(BATCH, -1, D_MODEL)[:, t:]
        after = outputs(changed)
        _close(after[:, : t + 1], before[:, : t + 1], atol=1e-6)
        assert np.abs(after[:, t + 1] - before[:, t + 1]).max() > 1e-4


def test_two_sided_memory_sees_the_right_flange() -> None:
    """Without the causal mask a query sees its whole memory block, the
    positions after it included."""
    x = _image()
    layer = LocalAttention2D(HEADS, KEY_DIM, query_block=(2, 6), memory_flange=(1, 3))
    changed = x.copy()
    changed[:, 1, 8] += 1.0  # inside the block of rows 0-1, columns 6-11
    delta = np.abs(_numpy(layer(x)) - _numpy(layer(changed))).max(axis=(0, 3))
    assert delta[0, 6] > 0.0  # an earlier query of the same block
    assert delta[0, 3] > 0.0  # left neighbour block: column 8 is in its flange
    assert delta[2, 0] > 0.0  # the block below: row 1 is in its top flange
    assert delta[0, 20] == 0.0  # out of reach
    assert delta[3, 20] == 0.0


# --------------------------------------------------------- cached sampling
@pytest.mark.parametrize(
    ("query_block", "memory_flange"), [((2, 3), (1, 3)), ((1, 6), (2, 2))]
)
def test_cached_positions_equal_full_causal_layer(
    query_block: tuple[int, int], memory_flange: tuple[int, int]
) -> None:
    rows, cols = 4, 12  # a 4 x 4 RGB image
    x = _image(rows, cols)
    layer = LocalAttention2D(
        HEADS, KEY_DIM, query_block=query_block, memory_flange=memory_flange
    )
    full = _numpy(layer(x, use_causal_mask=True)).reshape(BATCH, -1, D_MODEL)
    sequence = x.reshape(BATCH, rows * cols, D_MODEL)
    cache = layer.init_cache(BATCH)
    assert tuple(cache["keys"].shape) == (BATCH, HEADS, rows * cols, KEY_DIM)
    for index in range(rows * cols):
        position = sequence[:, index : index + 1]
        # A tensor index, as inside a compiled sampling loop, every few steps.
        step_index = keras.ops.convert_to_tensor(index) if index % 5 else index
        output, cache = layer.call_cached(position, cache, step_index)
        assert tuple(output.shape) == (BATCH, 1, D_MODEL)
        _close(_numpy(output)[:, 0], full[:, index])


def test_cache_needs_a_built_layer() -> None:
    layer = LocalAttention2D(HEADS, KEY_DIM, query_block=(2, 6), memory_flange=(1, 3))
    with pytest.raises(ValueError, match="built"):
        layer.init_cache(1)


# -------------------------------------------------------- shapes and Keras
def test_symbolic_output_spec_matches_eager_shapes() -> None:
    inputs = keras.Input((ROWS, COLS, D_MODEL))
    layer = LocalAttention2D(
        HEADS, KEY_DIM, query_block=(2, 6), memory_flange=(1, 3), output_dim=5
    )
    output, scores = layer(inputs, use_causal_mask=True, return_attention_scores=True)
    assert tuple(output.shape) == (None, ROWS, COLS, 5)
    assert tuple(scores.shape) == (None, HEADS, 2, 4, 12, 36)
    eager_output, eager_scores = layer(
        _image(), use_causal_mask=True, return_attention_scores=True
    )
    assert tuple(eager_output.shape)[1:] == (ROWS, COLS, 5)
    assert tuple(eager_scores.shape)[1:] == (HEADS, 2, 4, 12, 36)


def test_config_round_trip_and_serialization() -> None:
    layer = LocalAttention2D(
        HEADS, KEY_DIM, query_block=(2, 6), memory_flange=(1, 3), dropout=0.1
    )
    config = layer.get_config()
    assert config["query_block"] == [2, 6] and config["memory_flange"] == [1, 3]
    restored = keras.layers.deserialize(keras.layers.serialize(layer))
    assert isinstance(restored, LocalAttention2D)
    assert restored.query_block == (2, 6) and restored.memory_flange == (1, 3)
    assert restored.get_config() == config


def test_attention_dropout_only_in_training() -> None:
    x = _image()
    layer = LocalAttention2D(
        HEADS, KEY_DIM, query_block=(2, 6), memory_flange=(1, 3), dropout=0.5
    )
    inference = _numpy(layer(x, use_causal_mask=True))
    _close(layer(x, use_causal_mask=True, training=False), inference, atol=0.0)
    trained = _numpy(layer(x, use_causal_mask=True, training=True))
    assert np.abs(trained - inference).max() > 1e-4


# ---------------------------------------------------------- bad arguments
@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("query_block", (0, 4)),
        ("query_block", (2, -1)),
        ("query_block", 4),
        ("query_block", (2, 3, 4)),
        ("query_block", (2.0, 4)),
        ("memory_flange", (-1, 2)),
        ("memory_flange", (1, True)),
        ("memory_flange", None),
    ],
)
def test_bad_block_arguments_raise(name: str, value: object) -> None:
    kwargs = {"query_block": (2, 6), "memory_flange": (1, 3), name: value}
    with pytest.raises(ValueError, match=rf"`{name}`.*{name}="):
        LocalAttention2D(HEADS, KEY_DIM, **kwargs)
    with pytest.raises(ValueError, match=rf"`{name}`.*{name}="):
        local_2d_attention_mask(
            ROWS, COLS, kwargs["query_block"], kwargs["memory_flange"]
        )


def test_image_not_a_multiple_of_the_block_raises() -> None:
    layer = LocalAttention2D(HEADS, KEY_DIM, query_block=(3, 8), memory_flange=(1, 3))
    message = (
        r"query_block=\(3, 8\)\. Pad the image to 6 rows x 24 columns or "
        r"choose query_block=\(2, 8\)"
    )
    with pytest.raises(ValueError, match=message):
        layer(_image())
    with pytest.raises(ValueError, match=message):
        local_2d_attention_mask(ROWS, COLS, (3, 8), (1, 3))
    with pytest.raises(ValueError, match="Pad the image"):
        LocalAttention2D(HEADS, KEY_DIM, query_block=(2, 5), memory_flange=(0, 0))(
            keras.Input((ROWS, COLS, D_MODEL))
        )


def test_block_larger_than_the_image_raises() -> None:
    layer = LocalAttention2D(HEADS, KEY_DIM, query_block=(8, 6), memory_flange=(1, 3))
    with pytest.raises(
        ValueError, match=r"larger than an image of 4 rows.*query_block=\(4, 6\)"
    ):
        layer(_image())


@pytest.mark.parametrize("shape", [(COLS, D_MODEL), (None, COLS, D_MODEL)])
def test_bad_input_shapes_raise(shape: tuple) -> None:
    layer = LocalAttention2D(HEADS, KEY_DIM, query_block=(2, 6), memory_flange=(1, 3))
    match = "rank 4" if len(shape) == 2 else "static image size"
    with pytest.raises(ValueError, match=match):
        layer(keras.Input(shape))


def test_non_positive_image_size_raises() -> None:
    with pytest.raises(ValueError, match="rows.*rows=0"):
        local_2d_attention_mask(0, COLS, (1, 6), (1, 3))

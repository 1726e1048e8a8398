"""Tests of the local 2D block self-attention (Image Transformer, §3.2)."""

from __future__ import annotations

from pathlib import Path

import keras
import numpy as np
import pytest

from keras_transformer.layers import LocalAttention2D, local_2d_attention_mask
from keras_transformer.layers.attention import MultiHeadAttention
from keras_transformer.layers.local_attention import LocalBlockAttention
from keras_transformer.layers.local_attention_2d import (
    GENERATION_ORDERS,
    generation_positions,
)
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
    x = getattr(x, "output", x)  # an attention layer's `AttentionResult`
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
@pytest.mark.parametrize("order", GENERATION_ORDERS)
def test_layer_contract(tmp_path: Path, order: str) -> None:
    run_layer_test(
        LocalAttention2D,
        {
            "num_heads": HEADS,
            "key_dim": KEY_DIM,
            "query_block": (2, 6),
            "memory_flange": (1, 3),
            "generation_order": order,
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


@pytest.mark.parametrize("order", GENERATION_ORDERS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("rows", "cols", "query_block", "memory_flange"), GEOMETRIES)
def test_equals_multi_head_attention_with_dense_mask(
    rows: int,
    cols: int,
    query_block: tuple[int, int],
    memory_flange: tuple[int, int],
    causal: bool,
    order: str,
) -> None:
    x = _image(rows, cols)
    layer = LocalAttention2D(
        HEADS,
        KEY_DIM,
        query_block=query_block,
        memory_flange=memory_flange,
        generation_order=order,
    )
    dense = _dense_twin(layer, x)
    sequence = x.reshape(BATCH, rows * cols, D_MODEL)
    mask = local_2d_attention_mask(
        rows, cols, query_block, memory_flange, causal, generation_order=order
    )
    expected, expected_scores, _ = dense(sequence, sequence, attention_mask=mask[None])
    output, scores, _ = layer(x, use_causal_mask=causal)
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
    # The paper's order: the blocks above (row 1, its right flange included)
    # and to the left (column 1) come first; the query is the first of its
    # own block; the block to the right (column 4) comes later.
    blocks = np.zeros((4, 6), int)
    blocks[1, 1:5] = blocks[2:4, 1] = blocks[2, 2] = 1
    causal = _numpy(local_2d_attention_mask(4, 6, (2, 2), (1, 1), causal=True))
    assert causal.astype(int)[2 * 6 + 2].reshape(4, 6).tolist() == blocks.tolist()
    # Whole-image raster order: row 1 (above) whole, row 2 up to the query.
    expected[2, 3:] = 0
    expected[3] = 0
    image = _numpy(
        local_2d_attention_mask(
            4, 6, (2, 2), (1, 1), causal=True, generation_order="image"
        )
    )
    assert image.astype(int)[2 * 6 + 2].reshape(4, 6).tolist() == expected.tolist()
    # Every query sees itself.
    assert np.all(np.diag(causal)) and np.all(np.diag(image))


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
@pytest.mark.parametrize("order", GENERATION_ORDERS)
@pytest.mark.parametrize(
    ("query_block", "memory_flange"), [((2, 6), (1, 3)), ((2, 6), (2, 12))]
)
def test_causal_outputs_ignore_later_positions(
    query_block: tuple[int, int], memory_flange: tuple[int, int], order: str
) -> None:
    """Changing the inputs generated after step t changes no output up to t."""
    x = _image()
    layer = LocalAttention2D(
        HEADS,
        KEY_DIM,
        query_block=query_block,
        memory_flange=memory_flange,
        generation_order=order,
    )
    # (n,): the raster positions in generation order.
    steps = generation_positions(ROWS, COLS, query_block, order)
    before = _numpy(layer(x, use_causal_mask=True)).reshape(BATCH, -1, D_MODEL)
    for t in (0, 7, 30, 50, ROWS * COLS - 2):
        later = steps[t + 1 :]
        changed = x.reshape(BATCH, -1, D_MODEL).copy()
        changed[:, later] = _image(seed=t + 1).reshape(BATCH, -1, D_MODEL)[:, later]
        after = _numpy(layer(changed.reshape(x.shape), use_causal_mask=True))
        after = after.reshape(BATCH, -1, D_MODEL)
        _close(after[:, steps[: t + 1]], before[:, steps[: t + 1]], atol=1e-6)
        assert np.abs(after[:, steps[t + 1]] - before[:, steps[t + 1]]).max() > 1e-4


@pytest.mark.parametrize("order", GENERATION_ORDERS)
def test_shifted_inputs_never_see_the_predicted_position(order: str) -> None:
    """The mask lets a position see itself (MultiHeadAttention's convention);
    a model feeds each position the embedding of the intensity generated
    before it (inputs shifted right by one step of the generation order), so
    the output that predicts an intensity depends on no intensity generated
    with it or later."""
    layer = LocalAttention2D(
        HEADS, KEY_DIM, query_block=(2, 6), memory_flange=(1, 3), generation_order=order
    )
    steps = generation_positions(ROWS, COLS, (2, 6), order)
    # One row per intensity, in generation order.
    embedded = _image().reshape(BATCH, -1, D_MODEL)

    def outputs(embedded: np.ndarray) -> np.ndarray:
        """The outputs in generation order."""
        start = np.zeros_like(embedded[:, :1])
        shifted = np.concatenate([start, embedded[:, :-1]], axis=1)
        grid = np.empty_like(shifted)
        grid[:, steps] = shifted  # back to raster positions
        output = layer(grid.reshape(BATCH, ROWS, COLS, D_MODEL), use_causal_mask=True)
        return _numpy(output).reshape(BATCH, -1, D_MODEL)[:, steps]

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
@pytest.mark.parametrize("order", GENERATION_ORDERS)
@pytest.mark.parametrize(
    ("query_block", "memory_flange"), [((2, 3), (1, 3)), ((1, 6), (2, 2))]
)
def test_cached_positions_equal_full_causal_layer(
    query_block: tuple[int, int], memory_flange: tuple[int, int], order: str
) -> None:
    """Fed one position at a time in the generation order, the cached layer
    gives the causal layer's output at every position."""
    rows, cols = 4, 12  # a 4 x 4 RGB image
    x = _image(rows, cols)
    layer = LocalAttention2D(
        HEADS,
        KEY_DIM,
        query_block=query_block,
        memory_flange=memory_flange,
        generation_order=order,
    )
    full = _numpy(layer(x, use_causal_mask=True)).reshape(BATCH, -1, D_MODEL)
    sequence = x.reshape(BATCH, rows * cols, D_MODEL)
    # The one cache layout of every attention layer, through the one call.
    cache = layer.empty_cache(BATCH, rows * cols)
    assert tuple(cache[0].shape) == (BATCH, HEADS, rows * cols, KEY_DIM)
    for index in generation_positions(rows, cols, query_block, order).tolist():
        position = sequence[:, index : index + 1]
        # A tensor index, as inside a compiled sampling loop, every few steps.
        step_index = keras.ops.convert_to_tensor(index) if index % 5 else index
        output, _, cache = layer(
            position, cache=cache, cache_update_index=step_index, use_causal_mask=True
        )
        assert tuple(output.shape) == (BATCH, 1, D_MODEL)
        _close(_numpy(output)[:, 0], full[:, index])


def test_a_cached_call_takes_one_position_and_a_cache() -> None:
    layer = LocalAttention2D(HEADS, KEY_DIM, query_block=(2, 6), memory_flange=(1, 3))
    x = _image(4, 12)
    layer(x)
    two_positions = x.reshape(BATCH, -1, D_MODEL)[:, :2]
    with pytest.raises(ValueError, match=r"one position at a time.*shape=\(2, 2, 16\)"):
        layer(two_positions, cache=layer.empty_cache(BATCH, 48), cache_update_index=0)
    with pytest.raises(ValueError, match="without a cache"):
        layer(x, cache_update_index=0)


def test_cache_needs_a_built_layer() -> None:
    layer = LocalAttention2D(HEADS, KEY_DIM, query_block=(2, 6), memory_flange=(1, 3))
    # A first call with a cache cannot build the layer: it sees one position.
    with pytest.raises(ValueError, match=r"rank 4.*inputs.shape=\(1, 1, 16\)"):
        layer(np.zeros((1, 1, D_MODEL), "float32"), cache=layer.empty_cache(1, 4))


# -------------------------------------------------------- shapes and Keras
def test_symbolic_output_spec_matches_eager_shapes() -> None:
    inputs = keras.Input((ROWS, COLS, D_MODEL))
    layer = LocalAttention2D(
        HEADS, KEY_DIM, query_block=(2, 6), memory_flange=(1, 3), output_dim=5
    )
    output, scores, _ = layer(inputs, use_causal_mask=True)
    assert tuple(output.shape) == (None, ROWS, COLS, 5)
    assert tuple(scores.shape) == (None, HEADS, 2, 4, 12, 36)
    eager_output, eager_scores, _ = layer(_image(), use_causal_mask=True)
    assert tuple(eager_output.shape)[1:] == (ROWS, COLS, 5)
    assert tuple(eager_scores.shape)[1:] == (HEADS, 2, 4, 12, 36)


def test_config_round_trip_and_serialization() -> None:
    layer = LocalAttention2D(
        HEADS,
        KEY_DIM,
        query_block=(2, 6),
        memory_flange=(1, 3),
        settings={"dropout": 0.1},
    )
    config = layer.get_config()
    assert config["query_block"] == [2, 6] and config["memory_flange"] == [1, 3]
    assert config["generation_order"] == "blocks"
    restored = keras.layers.deserialize(keras.layers.serialize(layer))
    assert isinstance(restored, LocalAttention2D)
    assert restored.query_block == (2, 6) and restored.memory_flange == (1, 3)
    assert restored.get_config() == config


def test_a_saved_layer_without_the_order_loads_with_the_raster_order() -> None:
    """Layers saved before `generation_order` existed were causal in one
    raster order over the image; they load with that order."""
    config = LocalAttention2D(
        HEADS, KEY_DIM, query_block=(2, 6), memory_flange=(1, 3)
    ).get_config()
    del config["generation_order"]
    assert LocalAttention2D.from_config(config).generation_order == "image"
    with pytest.raises(ValueError, match=r"generation_order='rows'"):
        LocalAttention2D(
            HEADS,
            KEY_DIM,
            query_block=(2, 6),
            memory_flange=(1, 3),
            generation_order="rows",
        )


def test_attention_dropout_only_in_training() -> None:
    x = _image()
    layer = LocalAttention2D(
        HEADS,
        KEY_DIM,
        query_block=(2, 6),
        memory_flange=(1, 3),
        settings={"dropout": 0.5},
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


# ------------------------------------------- the paper's order, from its text
def _paper_mask(
    rows: int,
    cols: int,
    query_block: tuple[int, int],
    memory_flange: tuple[int, int],
    causal: bool,
) -> np.ndarray:
    """§3.2 read literally, one query and one key at a time.

    The query's memory block is its query block extended by h_m rows above
    and w_m columns left and right. "We generate the image one query block
    after another, ordering the blocks in raster-scan order", the pixels of
    a block in raster order: a key generated no later than the query is one
    in an earlier block (block row first, then block column) or in the same
    block and not after the query in raster order.
    """
    (h_q, w_q), (h_m, w_m) = query_block, memory_flange
    n = rows * cols
    mask = np.zeros((n, n), bool)
    for query in range(n):
        r, c = divmod(query, cols)
        for key in range(n):
            kr, kc = divmod(key, cols)
            top, left = r // h_q * h_q, c // w_q * w_q
            in_memory = (
                top - h_m <= kr < top + h_q and left - w_m <= kc < left + w_q + w_m
            )
            query_rank = (r // h_q, c // w_q, r % h_q, c % w_q)
            key_rank = (kr // h_q, kc // w_q, kr % h_q, kc % w_q)
            mask[query, key] = in_memory and (not causal or key_rank <= query_rank)
    return mask


PAPER_GEOMETRIES = [
    # (rows, cols, query_block, memory_flange)
    (2, 4, (2, 2), (0, 1)),  # the minimal case of issue 21
    (8, 8, (4, 4), (3, 3)),
    (4, 12, (2, 3), (1, 2)),  # non-square grid and blocks
    (6, 8, (3, 2), (2, 3)),  # flanges wider than a block
    (4, 6, (1, 6), (2, 0)),  # full-width blocks: the raster order
]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(
    ("rows", "cols", "query_block", "memory_flange"), PAPER_GEOMETRIES
)
def test_mask_equals_the_papers_text(
    rows: int,
    cols: int,
    query_block: tuple[int, int],
    memory_flange: tuple[int, int],
    causal: bool,
) -> None:
    mask = _numpy(
        local_2d_attention_mask(rows, cols, query_block, memory_flange, causal)
    )
    expected = _paper_mask(rows, cols, query_block, memory_flange, causal)
    np.testing.assert_array_equal(mask, expected)


def test_the_two_cells_of_issue_21() -> None:
    """A 2 x 4 grid, 2 x 2 query blocks, memory flange (0, 1): query (0, 2)
    also sees (1, 1) (an earlier block), query (1, 0) no longer sees (0, 2)
    (a later block). The whole-image raster order is the other way round."""

    def cell(mask: object, query: tuple[int, int], key: tuple[int, int]) -> bool:
        return bool(_numpy(mask)[query[0] * 4 + query[1], key[0] * 4 + key[1]])

    blocks = local_2d_attention_mask(2, 4, (2, 2), (0, 1), causal=True)
    image = local_2d_attention_mask(
        2, 4, (2, 2), (0, 1), causal=True, generation_order="image"
    )
    row_0_2 = _numpy(blocks)[2].reshape(2, 4)
    assert {tuple(p) for p in np.argwhere(row_0_2)} == {(0, 1), (0, 2), (1, 1)}
    assert cell(blocks, (0, 2), (1, 1)) and not cell(image, (0, 2), (1, 1))
    assert not cell(blocks, (1, 0), (0, 2)) and cell(image, (1, 0), (0, 2))


def test_the_orders_differ_on_144_of_1600_pairs_on_8x8() -> None:
    blocks = _numpy(local_2d_attention_mask(8, 8, (4, 4), (3, 3), causal=True))
    image = _numpy(
        local_2d_attention_mask(8, 8, (4, 4), (3, 3), True, generation_order="image")
    )
    assert blocks.sum() == image.sum() == 1600
    assert (blocks & ~image).sum() == (image & ~blocks).sum() == 144


def test_generation_positions_go_block_by_block() -> None:
    assert generation_positions(2, 4, (2, 2)).tolist() == [0, 1, 4, 5, 2, 3, 6, 7]
    assert generation_positions(2, 4, (2, 2), "image").tolist() == list(range(8))
    assert generation_positions(2, 4, None).tolist() == list(range(8))
    # Full-width blocks: the raster order.
    assert generation_positions(4, 6, (2, 6)).tolist() == list(range(24))
    with pytest.raises(ValueError, match="generation_order='spiral'"):
        generation_positions(2, 4, (2, 2), "spiral")

"""Tests of the restricted (local) self-attention layers (paper §4, Table 1)."""

from __future__ import annotations

from pathlib import Path

import keras
import numpy as np
import pytest

from keras_transformer.layers.attention import MultiHeadAttention
from keras_transformer.layers.local_attention import (
    LocalBlockAttention,
    RestrictedMultiHeadAttention,
    local_block_attention_mask,
    restricted_attention_mask,
)

BATCH, D_MODEL, HEADS, KEY_DIM = 2, 8, 2, 4


@pytest.fixture(autouse=True)
def _seed() -> None:
    keras.utils.set_random_seed(0)


def _inputs(length: int, seed: int = 0) -> np.ndarray:
    return (
        np.random.default_rng(seed)
        .normal(size=(BATCH, length, D_MODEL))
        .astype("float32")
    )


def _dense_twin(layer: MultiHeadAttention, x: np.ndarray) -> MultiHeadAttention:
    """A full MultiHeadAttention holding the same weights as `layer`."""
    layer(x)
    twin = MultiHeadAttention(num_heads=HEADS, key_dim=KEY_DIM)
    twin(x, x)
    twin.set_weights(layer.get_weights())
    return twin


def _dtype(x: object) -> str:
    return keras.backend.standardize_dtype(x.dtype)


def _numpy(x: object, dtype: str | None = None) -> np.ndarray:
    """A backend tensor (or array) as a NumPy array, on every backend."""
    x = getattr(x, "output", x)  # an attention layer's `AttentionResult`
    return np.asarray(keras.ops.convert_to_numpy(x), dtype)


def _close(a: object, b: object, atol: float = 1e-5) -> None:
    np.testing.assert_allclose(_numpy(a), _numpy(b), atol=atol, rtol=1e-5)


# ----------------------------------------------------- equivalence with MHA
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(
    ("length", "window", "block_size"),
    [(16, 4, None), (13, 4, None), (13, 3, 2), (11, 2, 5)],
)
def test_restricted_equals_dense_band_mask(
    length: int, window: int, block_size: int | None, causal: bool
) -> None:
    x = _inputs(length)
    layer = RestrictedMultiHeadAttention(
        HEADS, KEY_DIM, window=window, block_size=block_size
    )
    dense = _dense_twin(layer, x)
    band = restricted_attention_mask(length, window, causal=causal)[None]
    expected, expected_scores, _ = dense(x, x, attention_mask=band)
    output, scores, _ = layer(x, use_causal_mask=causal)
    _close(output, expected)
    _close(layer.local_to_dense_scores(scores, length, causal), expected_scores)
    # Blocked layout: (batch, heads, n_blocks, b, b + 2r) or (..., b + r).
    block = block_size or window
    width = block + window + (0 if causal else window)
    assert tuple(scores.shape) == (BATCH, HEADS, -(-length // block), block, width)


def test_scores_layout_is_three_blocks_wide() -> None:
    layer = RestrictedMultiHeadAttention(HEADS, KEY_DIM, window=4)
    x = _inputs(16)
    _, scores, _ = layer(x)
    _, causal_scores, _ = layer(x, use_causal_mask=True)
    assert tuple(scores.shape) == (BATCH, HEADS, 4, 4, 12)
    assert tuple(causal_scores.shape) == (BATCH, HEADS, 4, 4, 8)
    # Each real query row is a distribution over its local keys.
    _close(_numpy(scores).sum(-1), np.ones((BATCH, HEADS, 4, 4)))


@pytest.mark.parametrize("causal", [False, True])
def test_window_covering_sequence_equals_full_attention(causal: bool) -> None:
    x = _inputs(9)
    layer = RestrictedMultiHeadAttention(HEADS, KEY_DIM, window=9)
    dense = _dense_twin(layer, x)
    _close(layer(x, use_causal_mask=causal), dense(x, x, use_causal_mask=causal))


def test_restricted_is_not_full_attention() -> None:
    x = _inputs(12)
    layer = RestrictedMultiHeadAttention(HEADS, KEY_DIM, window=2)
    dense = _dense_twin(layer, x)
    assert np.abs(_numpy(layer(x)) - _numpy(dense(x, x))).max() > 1e-3


def test_weights_interchangeable_with_multi_head_attention() -> None:
    x = _inputs(5)
    layer = RestrictedMultiHeadAttention(HEADS, KEY_DIM, window=2)
    dense = _dense_twin(layer, x)
    assert [w.path.split("/")[-1] for w in layer.weights] == [
        w.path.split("/")[-1] for w in dense.weights
    ]
    assert [tuple(w.shape) for w in layer.weights] == [
        tuple(w.shape) for w in dense.weights
    ]


# ------------------------------------------------------------- causality
def test_causal_outputs_ignore_future_tokens() -> None:
    length, t = 13, 6
    x = _inputs(length)
    changed = x.copy()
    changed[:, t + 1 :] = _inputs(length, seed=1)[:, t + 1 :]
    layer = RestrictedMultiHeadAttention(HEADS, KEY_DIM, window=3)
    before = _numpy(layer(x, use_causal_mask=True))
    after = _numpy(layer(changed, use_causal_mask=True))
    _close(before[:, : t + 1], after[:, : t + 1], atol=1e-6)
    assert np.abs(before[:, t + 1] - after[:, t + 1]).max() > 1e-4


def test_two_sided_outputs_ignore_tokens_beyond_window() -> None:
    length, window = 13, 3
    x = _inputs(length)
    changed = x.copy()
    changed[:, 10] += 1.0
    layer = RestrictedMultiHeadAttention(HEADS, KEY_DIM, window=window)
    delta = np.abs(_numpy(layer(x)) - _numpy(layer(changed))).max(axis=(0, 2))
    assert np.all(delta[: 10 - window] == 0.0)
    assert np.all(delta[10 - window :] > 0.0)


# --------------------------------------------------------------- padding
@pytest.mark.parametrize("causal", [False, True])
def test_padding_mask_matches_dense_and_hides_padded_keys(causal: bool) -> None:
    length = 13
    x = _inputs(length)
    padding = np.ones((BATCH, length), bool)
    padding[1, 9:] = False
    layer = RestrictedMultiHeadAttention(HEADS, KEY_DIM, window=4)
    dense = _dense_twin(layer, x)
    expected = dense(
        x,
        x,
        attention_mask=restricted_attention_mask(length, 4, causal=causal)[None],
        query_mask=padding,
        value_mask=padding,
    )
    output, scores, _ = layer(x, padding_mask=padding, use_causal_mask=causal)
    _close(output, expected)
    dense_scores = _numpy(layer.local_to_dense_scores(scores, length, causal))
    assert np.all(dense_scores[1, :, :, 9:] == 0.0)

    # Changing the padded content leaves the real positions unchanged.
    noisy = x.copy()
    noisy[1, 9:] = _inputs(length, seed=2)[1, 9:]
    _close(
        _numpy(layer(noisy, padding_mask=padding, use_causal_mask=causal))[1, :9],
        _numpy(output)[1, :9],
        atol=1e-6,
    )


def test_keras_implicit_mask_equals_explicit_padding_mask() -> None:
    ids = np.array([[3, 1, 4, 1, 5, 9, 2], [2, 6, 5, 0, 0, 0, 0]])
    embedding = keras.layers.Embedding(10, D_MODEL, mask_zero=True)
    layer = RestrictedMultiHeadAttention(HEADS, KEY_DIM, window=2)
    inputs = keras.Input((None,), dtype="int32")
    embedded = embedding(inputs)
    model = keras.Model(inputs, [layer(embedded), layer(embedded, embedded)])
    alone, pair = model(ids)
    raw = _numpy(embedding(ids))
    expected = layer(raw, padding_mask=ids != 0)
    _close(alone, expected)
    _close(pair, expected)
    assert np.abs(_numpy(layer(raw)) - _numpy(expected)).max() > 1e-5


def test_dense_attention_mask_is_combined_with_the_band() -> None:
    length = 10
    x = _inputs(length)
    extra = np.random.default_rng(3).random((BATCH, length, length)) > 0.3
    layer = RestrictedMultiHeadAttention(HEADS, KEY_DIM, window=3)
    dense = _dense_twin(layer, x)
    band = _numpy(restricted_attention_mask(length, 3, causal=True))
    _close(
        layer(x, attention_mask=extra, use_causal_mask=True),
        dense(x, x, attention_mask=extra & band[None]),
    )


def test_masks_of_other_lengths_are_refused_by_name() -> None:
    """The blocked layout took a `(batch, n)` padding mask as a dense
    `attention_mask`, or a mask of another length, with a reshape error."""
    x = _inputs(10)
    layer = RestrictedMultiHeadAttention(HEADS, KEY_DIM, window=3)
    shared = r"here \(batch, 10, 10\), True .* a \(10, 10\) mask shared"
    with pytest.raises(ValueError, match=shared):
        layer(x, attention_mask=np.ones((BATCH, 10), bool))
    with pytest.raises(ValueError, match=r"attention_mask.shape=\(2, 9, 10\)"):
        layer(x, attention_mask=np.ones((2, 9, 10), bool))
    with pytest.raises(ValueError, match="`query_mask` covers 9 positions"):
        layer(x, query_mask=np.ones((BATCH, 9), bool))


def test_float_masks_are_refused() -> None:
    """The blocked layout read a float padding mask as `> 0.5`: a mask of
    1.0 on padding (the other polarity) hid the real tokens."""
    x = _inputs(10)
    layer = RestrictedMultiHeadAttention(HEADS, KEY_DIM, window=3)
    padding = np.ones((BATCH, 10), "float32")
    with pytest.raises(ValueError, match=r"`key_mask` must be boolean .*=float32"):
        layer(x, key_mask=padding)
    with pytest.raises(ValueError, match=r"`attention_mask` must be boolean"):
        layer(x, attention_mask=np.zeros((BATCH, 10, 10), "float32"))
    with pytest.raises(ValueError, match=r"`padding_mask` must be boolean"):
        layer(x, padding_mask=padding)
    np.testing.assert_allclose(
        layer(x, key_mask=padding.astype(bool)).output, layer(x).output, atol=1e-6
    )


def test_variable_length_functional_model() -> None:
    inputs = keras.Input((None, D_MODEL))
    layer = RestrictedMultiHeadAttention(HEADS, KEY_DIM, window=3)
    model = keras.Model(inputs, layer(inputs, use_causal_mask=True))
    for length in (5, 14):
        x = _inputs(length)
        _close(model(x), layer(x, use_causal_mask=True))


# ---------------------------------------------------------- serialization
def test_config_round_trip() -> None:
    layer = RestrictedMultiHeadAttention(
        HEADS, KEY_DIM, window=3, block_size=2, settings={"dropout": 0.1}, name="local"
    )
    x = _inputs(7)
    layer(x)
    config = layer.get_config()
    assert config["window"] == 3 and config["block_size"] == 2
    clone = RestrictedMultiHeadAttention.from_config(config)
    clone(x)
    clone.set_weights(layer.get_weights())
    _close(clone(x), layer(x))
    restored = keras.layers.deserialize(keras.layers.serialize(layer))
    assert isinstance(restored, RestrictedMultiHeadAttention)
    assert restored.get_config() == config


def test_keras_save_and_load(tmp_path: Path) -> None:
    inputs = keras.Input((None, D_MODEL))
    outputs = RestrictedMultiHeadAttention(HEADS, KEY_DIM, window=3, name="r")(
        inputs, use_causal_mask=True
    ).output
    outputs = LocalBlockAttention(
        HEADS, KEY_DIM, query_block_length=3, memory_length=4, name="b"
    )(outputs, use_causal_mask=True).output
    model = keras.Model(inputs, outputs)
    path = tmp_path / "local.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    x = _inputs(11)
    _close(loaded(x), model(x), atol=0.0)
    assert loaded.get_layer("b").get_config()["memory_length"] == 4


# --------------------------------------------------------- mixed precision
@pytest.fixture
def mixed_float16():
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy("mixed_float16")
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)


@pytest.mark.usefixtures("mixed_float16")
def test_mixed_float16_is_finite() -> None:
    x = 50.0 * _inputs(13)
    padding = np.ones((BATCH, 13), bool)
    padding[0, 10:] = False
    layer = RestrictedMultiHeadAttention(HEADS, KEY_DIM, window=4)
    output, scores, _ = layer(x, padding_mask=padding, use_causal_mask=True)
    assert _dtype(output) == "float16" and _dtype(scores) == "float32"
    assert np.isfinite(_numpy(output, "float32")).all()
    block = LocalBlockAttention(HEADS, KEY_DIM, query_block_length=4, memory_length=4)
    assert np.isfinite(_numpy(block(x), "float32")).all()


# --------------------------------------------------------- cached decoding
@pytest.mark.parametrize("append", [False, True])
def test_restricted_attention_in_the_one_cache_layout_equals_full_causal(
    append: bool,
) -> None:
    """`call(..., cache=...)` over `empty_cache` (or a cache grown by a row
    before each step): the window bounds how far back a cached query looks,
    as in the full causal layer."""
    length, window = 9, 2
    x = _inputs(length)
    layer = RestrictedMultiHeadAttention(HEADS, KEY_DIM, window=window)
    full = _numpy(layer(x, use_causal_mask=True))
    cache = layer.empty_cache(BATCH, 1 if append else length)
    for index in range(length):
        if append and index:
            cache = tuple(
                np.concatenate([c, np.zeros_like(c[:, :, :1])], 2)
                for c in map(_numpy, cache)
            )
        output, scores, cache = layer(
            x[:, index : index + 1],
            cache=cache,
            cache_update_index=index,
            use_causal_mask=True,
        )
        _close(_numpy(output)[:, 0], full[:, index])
        # Nothing more than `window` positions back, nothing ahead.
        weights = _numpy(scores)[..., 0, :]
        assert not weights[..., : max(0, index - window)].any()
        assert not weights[..., index + 1 :].any()


# ------------------------------------------------------ local 1D blocks
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(
    ("length", "query_block_length", "memory_length"),
    [(12, 4, 4), (13, 4, 6), (10, 3, 0)],
)
def test_local_block_equals_dense_mask(
    length: int, query_block_length: int, memory_length: int, causal: bool
) -> None:
    x = _inputs(length)
    padding = np.ones((BATCH, length), bool)
    padding[0, -2:] = False
    layer = LocalBlockAttention(
        HEADS,
        KEY_DIM,
        query_block_length=query_block_length,
        memory_length=memory_length,
    )
    dense = _dense_twin(layer, x)
    mask = local_block_attention_mask(
        length, query_block_length, memory_length, causal=causal
    )
    expected, expected_scores, _ = dense(
        x,
        x,
        attention_mask=mask[None],
        query_mask=padding,
        value_mask=padding,
    )
    output, scores, _ = layer(x, padding_mask=padding, use_causal_mask=causal)
    _close(output, expected)
    _close(layer.local_to_dense_scores(scores, length, causal), expected_scores)
    width = memory_length + query_block_length
    assert tuple(scores.shape)[-2:] == (query_block_length, width)


def test_local_block_dense_mask_pattern() -> None:
    mask = _numpy(local_block_attention_mask(6, 2, 1, causal=True)).astype(int)
    assert mask.tolist() == [
        [1, 0, 0, 0, 0, 0],
        [1, 1, 0, 0, 0, 0],
        [0, 1, 1, 0, 0, 0],
        [0, 1, 1, 1, 0, 0],
        [0, 0, 0, 1, 1, 0],
        [0, 0, 0, 1, 1, 1],
    ]


# ------------------------------------------------------------ bad arguments
@pytest.mark.parametrize("window", [0, -3, 2.5, True, "4", None])
def test_bad_window_raises(window: object) -> None:
    with pytest.raises(ValueError, match=rf"`window`.*window={window!r}"):
        RestrictedMultiHeadAttention(HEADS, KEY_DIM, window=window)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"window": 2, "block_size": 0}, "block_size"),
        ({"window": 2, "num_heads": 0}, "num_heads"),
        ({"window": 2, "settings": {"dropout": 1.5}}, "attention_settings.dropout"),
    ],
)
def test_bad_restricted_arguments_raise(kwargs: dict, name: str) -> None:
    arguments = {"num_heads": HEADS, "key_dim": KEY_DIM, **kwargs}
    value = {**kwargs, **kwargs.get("settings", {})}[name.split(".")[-1]]
    with pytest.raises(ValueError, match=f"`{name}`.*{name}={value!r}"):
        RestrictedMultiHeadAttention(**arguments)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"query_block_length": 0, "memory_length": 2}, "query_block_length"),
        ({"query_block_length": 3.0, "memory_length": 2}, "query_block_length"),
        ({"query_block_length": 2, "memory_length": -1}, "memory_length"),
    ],
)
def test_bad_local_block_arguments_raise(kwargs: dict, name: str) -> None:
    with pytest.raises(ValueError, match=f"`{name}`.*{name}={kwargs[name]!r}"):
        LocalBlockAttention(HEADS, KEY_DIM, **kwargs)


def test_cross_attention_raises() -> None:
    layer = RestrictedMultiHeadAttention(HEADS, KEY_DIM, window=2)
    with pytest.raises(ValueError, match=r"self-attention only.*value\.shape"):
        layer(_inputs(6), _inputs(4))
    inputs = keras.Input((6, D_MODEL))
    memory = keras.Input((4, D_MODEL))
    with pytest.raises(ValueError, match="self-attention only"):
        LocalBlockAttention(HEADS, KEY_DIM, query_block_length=2, memory_length=2)(
            inputs, memory
        )


# ------------------------------------------------------ dropout and shapes
def test_attention_dropout_only_in_training() -> None:
    x = _inputs(10)
    layer = RestrictedMultiHeadAttention(
        HEADS, KEY_DIM, window=3, settings={"dropout": 0.5}
    )
    inference = _numpy(layer(x))
    _close(layer(x, training=False), inference, atol=0.0)
    assert np.abs(_numpy(layer(x, training=True)) - inference).max() > 1e-4


def test_symbolic_output_spec_matches_eager_shapes() -> None:
    inputs = keras.Input((13, D_MODEL))
    layer = RestrictedMultiHeadAttention(HEADS, KEY_DIM, window=4, output_dim=6)
    output, scores, _ = layer(inputs, use_causal_mask=True)
    assert tuple(output.shape) == (None, 13, 6)
    assert tuple(scores.shape) == (None, HEADS, 4, 4, 8)
    eager_output, eager_scores, _ = layer(_inputs(13), use_causal_mask=True)
    assert tuple(eager_output.shape)[1:] == (13, 6)
    assert tuple(eager_scores.shape)[1:] == (HEADS, 4, 4, 8)


@pytest.mark.parametrize(("block", "memory"), [(4, 8), (3, 0), (5, 7)])
def test_local_block_cached_positions_equal_the_full_causal_layer(
    block: int, memory: int
) -> None:
    keras.utils.set_random_seed(7)
    layer = LocalBlockAttention(
        num_heads=2, key_dim=4, query_block_length=block, memory_length=memory
    )
    x = np.random.default_rng(7).normal(size=(2, 15, 8)).astype("float32")
    full = _numpy(layer(x, use_causal_mask=True))
    cache = layer.empty_cache(2, 15)
    for index in range(15):
        output, _, cache = layer(
            x[:, index : index + 1],
            cache=cache,
            cache_update_index=index,
            use_causal_mask=True,
        )
        np.testing.assert_allclose(
            keras.ops.convert_to_numpy(output)[:, 0], full[:, index], atol=1e-5
        )


def test_local_block_cache_samples_one_position_at_a_time() -> None:
    layer = LocalBlockAttention(
        num_heads=2, key_dim=4, query_block_length=2, memory_length=2
    )
    x = np.zeros((1, 4, 8), "float32")
    layer(x)
    with pytest.raises(ValueError, match="one position at a time"):
        layer(x[:, :2], cache=layer.empty_cache(1, 4), cache_update_index=0)

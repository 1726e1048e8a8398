"""Position encodings: Eqs. 5-6, learned embeddings, merge modes."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_transformer.layers import (
    PositionEmbedding,
    ScaledEmbedding,
    SinusoidalPositionEncoding,
    sinusoidal_encoding,
)
from tests.layer_testing import run_layer_test


def numpy_sinusoids(length, depth):
    """Eqs. 5-6 written out: PE(pos, 2i) = sin, PE(pos, 2i+1) = cos."""
    table = np.zeros((length, depth))
    for pos in range(length):
        for i in range(depth // 2):
            angle = pos / 10000 ** (2 * i / depth)
            table[pos, 2 * i] = np.sin(angle)
            table[pos, 2 * i + 1] = np.cos(angle)
    return table


@pytest.mark.parametrize("merge_mode", ["add", "concat"])
def test_sinusoidal_layer_contract(tmp_path, merge_mode):
    kwargs = {"merge_mode": merge_mode}
    if merge_mode == "concat":
        kwargs["encoding_dim"] = 6
    x = np.random.rand(2, 7, 8).astype("float32")
    expected_dim = 14 if merge_mode == "concat" else 8
    run_layer_test(
        SinusoidalPositionEncoding, kwargs, [x], (2, 7, expected_dim), tmp_path
    )


@pytest.mark.parametrize("merge_mode", ["add", "concat"])
def test_learned_layer_contract(tmp_path, merge_mode):
    kwargs = {"max_length": 10, "merge_mode": merge_mode}
    if merge_mode == "concat":
        kwargs["encoding_dim"] = 4
    x = np.random.rand(2, 7, 8).astype("float32")
    expected_dim = 12 if merge_mode == "concat" else 8
    run_layer_test(PositionEmbedding, kwargs, [x], (2, 7, expected_dim), tmp_path)


def test_equations_5_and_6_match_numpy():
    table = ops.convert_to_numpy(sinusoidal_encoding(np.arange(50), 16))
    np.testing.assert_allclose(table, numpy_sinusoids(50, 16), atol=2e-5)


def test_known_values():
    table = ops.convert_to_numpy(sinusoidal_encoding(np.arange(3), 4))
    # PE(1, 0) = sin(1), PE(1, 1) = cos(1), PE(2, 2) = sin(2 / 10000^(2/4)).
    assert table[1, 0] == pytest.approx(0.8414710, abs=1e-6)
    assert table[1, 1] == pytest.approx(0.5403023, abs=1e-6)
    assert table[2, 2] == pytest.approx(0.0199987, abs=1e-6)
    assert table[0, 1] == pytest.approx(1.0)


def test_add_and_concat_place_the_encoding():
    x = np.zeros((1, 5, 8), "float32")
    added = ops.convert_to_numpy(SinusoidalPositionEncoding()(x))
    np.testing.assert_allclose(added[0], numpy_sinusoids(5, 8), atol=1e-5)
    x = np.ones((1, 5, 8), "float32")
    concat = ops.convert_to_numpy(
        SinusoidalPositionEncoding(merge_mode="concat", encoding_dim=4)(x)
    )
    np.testing.assert_array_equal(concat[0, :, :8], 1.0)
    np.testing.assert_allclose(concat[0, :, 8:], numpy_sinusoids(5, 4), atol=1e-5)


@pytest.mark.parametrize(
    "layer", [SinusoidalPositionEncoding(), PositionEmbedding(max_length=20)]
)
def test_start_index_continues_the_sequence(layer):
    x = np.zeros((2, 10, 8), "float32")
    whole = ops.convert_to_numpy(layer(x))
    part = ops.convert_to_numpy(layer(x[:, :3], start_index=4))
    np.testing.assert_allclose(part, whole[:, 4:7], atol=1e-6)


def test_odd_d_model_is_refused_for_sinusoids():
    with pytest.raises(ValueError, match="even"):
        SinusoidalPositionEncoding()(np.zeros((1, 3, 7), "float32"))


def test_sequence_longer_than_learned_table_is_refused():
    layer = PositionEmbedding(max_length=4)
    with pytest.raises(ValueError, match="max_length=4"):
        layer(np.zeros((1, 6, 8), "float32"))


def test_bad_arguments():
    with pytest.raises(ValueError, match="merge_mode='sum'"):
        SinusoidalPositionEncoding(merge_mode="sum")
    with pytest.raises(ValueError, match="encoding_dim"):
        PositionEmbedding(max_length=4, merge_mode="concat")
    with pytest.raises(ValueError, match="max_length=0"):
        PositionEmbedding(max_length=0)


def test_keras_mask_passes_through():
    ids = keras.Input((None,), dtype="int32")
    hidden = ScaledEmbedding(10, 8, mask_zero=True)(ids)
    for layer in (SinusoidalPositionEncoding(), PositionEmbedding(max_length=9)):
        output = layer(hidden)
        assert output._keras_mask is not None

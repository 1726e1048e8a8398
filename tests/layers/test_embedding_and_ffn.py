"""ScaledEmbedding (§3.4) and FeedForward (Eq. 4)."""

import math

import keras
import numpy as np
import pytest
from keras import ops

from keras_transformer.layers import FeedForward, ScaledEmbedding
from tests.layer_testing import run_layer_test


def test_embedding_contract(tmp_path):
    ids = np.array([[1, 2, 3, 0], [4, 5, 0, 0]], "int32")
    run_layer_test(
        ScaledEmbedding,
        {"vocabulary_size": 10, "embedding_dim": 6, "mask_zero": True},
        [ids],
        (2, 4, 6),
        tmp_path,
        expected_num_weights=1,
    )


def test_embeddings_are_multiplied_by_sqrt_d_model():
    layer = ScaledEmbedding(10, 16)
    ids = np.array([[3, 7]])
    output = ops.convert_to_numpy(layer(ids))
    table = ops.convert_to_numpy(layer.embeddings)
    np.testing.assert_allclose(output[0], table[[3, 7]] * math.sqrt(16), rtol=1e-6)


def test_ids_outside_the_vocabulary_or_not_whole_are_refused_by_name():
    """An id past the vocabulary failed with TensorFlow's GatherV2 error on a
    CPU (zeros on a GPU), a negative one read a row from the end, and hidden
    states passed without reverse=True were cast to ids."""
    layer = ScaledEmbedding(10, 8, name="tokens")
    for ids, received in (([[11, 2]], "from 2 to 11"), ([[-1, 2]], "from -1 to 2")):
        with pytest.raises(ValueError) as error:
            layer(np.array(ids))
        assert (
            "Token ids must lie in [0, 10) for tokens (vocabulary_size=10). "
            f"Received ids {received}. Pass ids of the tokenizer the layer was "
            "built for, or a larger vocabulary_size."
        ) in str(error.value)
    for floats in (np.array([[1.5, 2.0]]), np.random.rand(2, 3, 8)):
        with pytest.raises(ValueError, match="Hidden states go onto the vocabulary"):
            layer(floats.astype("float32"))
    # Whole floats, the largest id and no ids at all are looked up.
    table = ops.convert_to_numpy(layer.embeddings) * math.sqrt(8)
    np.testing.assert_allclose(
        ops.convert_to_numpy(layer(np.array([[9.0, 0.0]], "float32")))[0],
        table[[9, 0]],
        rtol=1e-6,
    )
    assert tuple(layer(np.zeros((2, 0), "int32")).shape) == (2, 0, 8)


def test_reverse_uses_the_same_matrix():
    layer = ScaledEmbedding(10, 8)
    hidden = np.random.rand(2, 3, 8).astype("float32")
    layer(np.array([[1]]))
    logits = ops.convert_to_numpy(layer(hidden, reverse=True))
    table = ops.convert_to_numpy(layer.embeddings)
    np.testing.assert_allclose(logits, hidden @ table.T, rtol=1e-5)
    assert len(layer.weights) == 1


@pytest.mark.parametrize("dtype", ["float32", "mixed_float16"])
def test_a_precomputed_output_matrix_gives_the_same_logits(dtype):
    """`output_matrix()` is `E^T` in the compute dtype; passing it (as a
    decoding loop does, once per search) changes nothing in the logits."""
    layer = ScaledEmbedding(10, 8, dtype=dtype)
    hidden = layer(np.array([[1, 2, 3], [4, 5, 6]]))  # (2, 3, 8)
    matrix = layer.output_matrix()
    assert tuple(matrix.shape) == (8, 10)
    assert keras.backend.standardize_dtype(matrix.dtype) == layer.compute_dtype
    table = ops.convert_to_numpy(ops.cast(layer.embeddings, layer.compute_dtype))
    np.testing.assert_array_equal(ops.convert_to_numpy(matrix), table.T)
    logits = layer(hidden, reverse=True, output_matrix=matrix)
    assert keras.backend.standardize_dtype(logits.dtype) == "float32"
    np.testing.assert_allclose(
        ops.convert_to_numpy(logits),
        ops.convert_to_numpy(layer(hidden, reverse=True)),
        rtol=1e-6,
        atol=1e-6,
    )


def test_reverse_logits_are_float32_under_mixed_precision():
    layer = ScaledEmbedding(10, 8, dtype="mixed_float16")
    hidden = layer(np.array([[1, 2]]))
    assert keras.backend.standardize_dtype(hidden.dtype) == "float16"
    logits = layer(hidden, reverse=True)
    assert keras.backend.standardize_dtype(logits.dtype) == "float32"


def test_mask_zero_emits_padding_mask_and_reverse_does_not():
    ids = keras.Input((None,), dtype="int32")
    layer = ScaledEmbedding(10, 8, mask_zero=True)
    hidden = layer(ids)
    assert hidden._keras_mask is not None
    logits = layer(hidden, reverse=True)
    assert getattr(logits, "_keras_mask", None) is None


def test_reverse_with_wrong_size_is_refused():
    layer = ScaledEmbedding(10, 8)
    with pytest.raises(ValueError, match="hidden states of size 8"):
        layer(np.zeros((1, 2, 5), "float32"), reverse=True)


def test_feed_forward_contract(tmp_path):
    x = np.random.rand(2, 5, 8).astype("float32")
    run_layer_test(
        FeedForward,
        {"d_ff": 16, "dropout": 0.1},
        [x],
        (2, 5, 8),
        tmp_path,
        expected_num_weights=4,
    )


def test_equation_4_matches_numpy():
    rng = np.random.default_rng(0)
    layer = FeedForward(d_ff=12)
    x = rng.normal(size=(2, 5, 8)).astype("float32")
    layer(x)
    w1, b1, w2, b2 = [rng.normal(size=w.shape).astype("float32") for w in layer.weights]
    layer.set_weights([w1, b1, w2, b2])
    expected = np.maximum(0, x @ w1 + b1) @ w2 + b2
    np.testing.assert_allclose(
        ops.convert_to_numpy(layer(x)), expected, rtol=1e-4, atol=1e-5
    )


def test_feed_forward_dropout_only_in_training():
    layer = FeedForward(d_ff=64, dropout=0.5)
    x = np.random.rand(2, 5, 8).astype("float32")
    np.testing.assert_array_equal(
        ops.convert_to_numpy(layer(x)), ops.convert_to_numpy(layer(x, training=False))
    )
    assert not np.allclose(
        ops.convert_to_numpy(layer(x, training=True)), ops.convert_to_numpy(layer(x))
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"d_ff": 0}, "d_ff=0"), ({"d_ff": 8, "dropout": -0.1}, "dropout=-0.1")],
)
def test_feed_forward_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        FeedForward(**kwargs)


def test_embedding_bad_arguments():
    with pytest.raises(ValueError, match="vocabulary_size=0"):
        ScaledEmbedding(0, 8)

"""EncoderBlock and DecoderBlock: wiring, masks, causality, caching."""

import inspect

import keras
import numpy as np
import pytest
from keras import ops

from keras_transformer.layers import DecoderBlock, EncoderBlock, ScaledEmbedding
from tests.layer_testing import run_layer_test

BLOCK_ARGS = {"num_heads": 2, "d_ff": 16, "dropout": 0.1}


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_block_contract(tmp_path, norm_first):
    x = np.random.rand(2, 5, 8).astype("float32")
    run_layer_test(
        EncoderBlock,
        {**BLOCK_ARGS, "norm_first": norm_first},
        [x],
        (2, 5, 8),
        tmp_path,
        expected_num_weights=16,
    )


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_block_contract(tmp_path, norm_first):
    y = np.random.rand(2, 4, 8).astype("float32")
    x = np.random.rand(2, 6, 8).astype("float32")
    run_layer_test(
        DecoderBlock,
        {**BLOCK_ARGS, "norm_first": norm_first},
        [y, x],
        (2, 4, 8),
        tmp_path,
        expected_num_weights=26,
    )


def numpy_layer_norm(x, eps=1e-6):
    mean = x.mean(-1, keepdims=True)
    var = x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps)


def test_post_ln_and_pre_ln_wiring():
    """Post-LN: LayerNorm(x + Sublayer(x)); pre-LN: x + Sublayer(LayerNorm(x))."""
    x = np.random.rand(1, 4, 8).astype("float32")
    for norm_first in (False, True):
        block = EncoderBlock(num_heads=2, d_ff=16, dropout=0.0, norm_first=norm_first)
        block(x)
        attention, ffn = block.self_attention, block.feed_forward
        if norm_first:
            h = x + ops.convert_to_numpy(
                attention(numpy_layer_norm(x), numpy_layer_norm(x)).output
            )
            expected = h + ops.convert_to_numpy(ffn(numpy_layer_norm(h)))
        else:
            h = numpy_layer_norm(x + ops.convert_to_numpy(attention(x, x).output))
            expected = numpy_layer_norm(h + ops.convert_to_numpy(ffn(h)))
        np.testing.assert_allclose(ops.convert_to_numpy(block(x)), expected, atol=1e-4)


def test_decoder_is_causal():
    rng = np.random.default_rng(0)
    block = DecoderBlock(**BLOCK_ARGS)
    y = rng.normal(size=(1, 6, 8)).astype("float32")
    x = rng.normal(size=(1, 5, 8)).astype("float32")
    first = ops.convert_to_numpy(block(y, x))
    y_changed = y.copy()
    y_changed[:, 4] += 3.0
    second = ops.convert_to_numpy(block(y_changed, x))
    np.testing.assert_allclose(first[:, :4], second[:, :4], atol=1e-5)
    assert not np.allclose(first[:, 4:], second[:, 4:])


def test_encoder_implicit_mask_equals_explicit_mask():
    ids = np.array([[4, 5, 6, 0, 0], [7, 8, 0, 0, 0]])
    hidden = ScaledEmbedding(20, 8, mask_zero=True)(ids)
    block = EncoderBlock(**BLOCK_ARGS)
    implicit = ops.convert_to_numpy(block(hidden))
    explicit = ops.convert_to_numpy(
        block(ops.convert_to_numpy(hidden), padding_mask=ids != 0)
    )
    np.testing.assert_allclose(implicit, explicit, atol=1e-6)
    unmasked = ops.convert_to_numpy(block(ops.convert_to_numpy(hidden)))
    assert not np.allclose(implicit[0, :3], unmasked[0, :3])


def test_blocks_refuse_float_padding_masks():
    """A padding mask of 1.0 on padding (the other polarity) was cast to bool
    and computed, attending to the padding only."""
    hidden = np.random.default_rng(0).normal(size=(2, 5, 8)).astype("float32")
    on_padding = np.array([[0, 0, 0, 1, 1], [0, 0, 1, 1, 1]], "float32")
    with pytest.raises(ValueError, match=r"`padding_mask` must be boolean .*=float32"):
        EncoderBlock(**BLOCK_ARGS)(hidden, padding_mask=on_padding)
    with pytest.raises(ValueError, match=r"`encoder_padding_mask` must be boolean"):
        DecoderBlock(**BLOCK_ARGS)(hidden, hidden, encoder_padding_mask=on_padding)


def test_decoder_implicit_masks_equal_explicit_masks():
    embedding = ScaledEmbedding(20, 8, mask_zero=True)
    source = np.array([[4, 5, 6, 0], [7, 8, 0, 0]])
    target = np.array([[2, 9, 9, 0, 0], [2, 9, 0, 0, 0]])
    block = DecoderBlock(**BLOCK_ARGS)
    x, y = embedding(source), embedding(target)
    implicit = ops.convert_to_numpy(block(y, x))
    explicit = ops.convert_to_numpy(
        block(
            ops.convert_to_numpy(y),
            ops.convert_to_numpy(x),
            decoder_padding_mask=target != 0,
            encoder_padding_mask=source != 0,
        )
    )
    np.testing.assert_allclose(implicit, explicit, atol=1e-6)


def test_padding_does_not_change_real_positions():
    rng = np.random.default_rng(1)
    encoder, decoder = EncoderBlock(**BLOCK_ARGS), DecoderBlock(**BLOCK_ARGS)
    x = rng.normal(size=(1, 6, 8)).astype("float32")
    y = rng.normal(size=(1, 5, 8)).astype("float32")
    source_mask = np.array([[1, 1, 1, 1, 0, 0]], bool)
    target_mask = np.array([[1, 1, 1, 0, 0]], bool)

    def run(x, y):
        encoded = encoder(x, padding_mask=source_mask)
        return ops.convert_to_numpy(encoded), ops.convert_to_numpy(
            decoder(
                y,
                encoded,
                decoder_padding_mask=target_mask,
                encoder_padding_mask=source_mask,
            )
        )

    first = run(x, y)
    x2, y2 = x.copy(), y.copy()
    x2[:, 4:] = 50.0
    y2[:, 3:] = -50.0
    second = run(x2, y2)
    np.testing.assert_allclose(first[0][:, :4], second[0][:, :4], atol=1e-5)
    np.testing.assert_allclose(first[1][:, :3], second[1][:, :3], atol=1e-5)


@pytest.mark.parametrize("norm_first", [False, True])
def test_cached_decoding_equals_full_pass(norm_first):
    rng = np.random.default_rng(2)
    block = DecoderBlock(**BLOCK_ARGS, norm_first=norm_first)
    y = rng.normal(size=(2, 6, 8)).astype("float32")
    x = rng.normal(size=(2, 5, 8)).astype("float32")
    source_mask = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], bool)
    full = ops.convert_to_numpy(block(y, x, encoder_padding_mask=source_mask))
    cache = block.init_cache(x, rows=8)
    assert tuple(cache["self_keys"].shape) == (2, 2, 8, 4)
    steps = []
    for index in range(6):
        output, cache = block(
            y[:, index : index + 1],
            encoder_padding_mask=source_mask,
            cache=cache,
            cache_update_index=index,
        )
        steps.append(ops.convert_to_numpy(output))
    np.testing.assert_allclose(np.concatenate(steps, 1), full, atol=1e-5)
    # Two tokens at once, starting at position 2, after a fresh prefix.
    cache = block.init_cache(x, rows=8)
    _, cache = block(
        y[:, :2], encoder_padding_mask=source_mask, cache=cache, cache_update_index=0
    )
    two, _ = block(
        y[:, 2:4], encoder_padding_mask=source_mask, cache=cache, cache_update_index=2
    )
    np.testing.assert_allclose(ops.convert_to_numpy(two), full[:, 2:4], atol=1e-5)


@pytest.mark.parametrize("norm_first", [False, True])
def test_integer_and_boolean_features_are_taken_as_their_values(norm_first):
    """Features of shape (batch, length, d_model) in an integer or boolean
    dtype pass as Dense and MultiHeadAttention take them, as their float
    values (the residual sum failed inside TensorFlow: "cannot compute AddN
    as input #1 was expected to be a int32 tensor but is a float tensor")."""
    values = np.random.default_rng(0).integers(0, 2, (2, 5, 8))
    memory = np.random.rand(2, 6, 8).astype("float32")
    blocks = (
        (EncoderBlock(**BLOCK_ARGS, norm_first=norm_first), ()),
        (DecoderBlock(**BLOCK_ARGS, norm_first=norm_first), (memory,)),
    )
    for block, encoder_output in blocks:
        expected = block(values.astype("float32"), *encoder_output)
        for dtype in ("int32", "int64", "bool"):
            outputs = block(values.astype(dtype), *encoder_output)
            assert keras.backend.standardize_dtype(outputs.dtype) == "float32"
            np.testing.assert_allclose(
                ops.convert_to_numpy(outputs), ops.convert_to_numpy(expected), rtol=1e-6
            )


def test_decoder_block_without_encoder_output_or_cache_is_refused():
    block = DecoderBlock(**BLOCK_ARGS)
    with pytest.raises(ValueError, match="needs the encoder output") as error:
        block.call(np.zeros((1, 2, 8), "float32"))
    # The remedy names init_cache's own arguments (it said `max_length`).
    names = list(inspect.signature(block.init_cache).parameters)
    assert f"init_cache({', '.join(names)})" in str(error.value)


def test_blocks_return_attention_maps():
    x = np.random.rand(2, 5, 8).astype("float32")
    y = np.random.rand(2, 3, 8).astype("float32")
    encoded, scores = EncoderBlock(**BLOCK_ARGS)(x, return_attention_scores=True)
    assert tuple(scores.shape) == (2, 2, 5, 5)
    decoder = DecoderBlock(**BLOCK_ARGS)
    _, self_scores, cross_scores = decoder(y, encoded, return_attention_scores=True)
    assert tuple(self_scores.shape) == (2, 2, 3, 3)
    assert tuple(cross_scores.shape) == (2, 2, 3, 5)
    # Causal: nothing above the diagonal.
    np.testing.assert_array_equal(np.triu(ops.convert_to_numpy(self_scores), 1), 0.0)
    symbolic = decoder(
        keras.Input((3, 8)), keras.Input((7, 8)), return_attention_scores=True
    )
    assert tuple(symbolic[2].shape) == (None, 2, 3, 7)


def test_residual_dropout_only_in_training():
    block = EncoderBlock(num_heads=2, d_ff=16, dropout=0.5)
    x = np.random.rand(2, 5, 8).astype("float32")
    np.testing.assert_array_equal(
        ops.convert_to_numpy(block(x)), ops.convert_to_numpy(block(x, training=False))
    )
    assert not np.allclose(
        ops.convert_to_numpy(block(x, training=True)), ops.convert_to_numpy(block(x))
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_heads": 0, "d_ff": 8}, "num_heads=0"),
        ({"num_heads": 2, "d_ff": 8, "dropout": 1.0}, "dropout=1.0"),
        ({"num_heads": 2, "d_ff": 8, "layer_norm_epsilon": 0}, "layer_norm_epsilon=0"),
    ],
)
def test_bad_block_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        EncoderBlock(**kwargs)


def test_indivisible_d_model_is_refused():
    with pytest.raises(ValueError, match="not divisible by num_heads=3"):
        EncoderBlock(num_heads=3, d_ff=8)(np.zeros((1, 2, 8), "float32"))


def test_decoder_block_cache_needs_built_block():
    with pytest.raises(ValueError, match="built"):
        DecoderBlock(**BLOCK_ARGS).init_cache(np.zeros((1, 2, 8), "float32"), 4)


def _copy_weights(source, target):
    target.set_weights(source.get_weights())


def test_windowed_encoder_block_equals_band_masked_full_block():
    """A window r (§4) equals full attention under a band mask."""
    rng = np.random.default_rng(4)
    x = rng.normal(size=(2, 11, 8)).astype("float32")
    padding = np.ones((2, 11), bool)
    padding[1, 8:] = False
    windowed = EncoderBlock(**BLOCK_ARGS, attention_settings={"window": 3})
    full = EncoderBlock(**BLOCK_ARGS)
    windowed(x)
    full(x)
    _copy_weights(windowed, full)
    positions = np.arange(11)
    band = np.abs(positions[:, None] - positions[None, :]) <= 3
    expected, expected_scores = full(
        x,
        padding_mask=padding,
        attention_mask=np.broadcast_to(band, (2, 11, 11)),
        return_attention_scores=True,
    )
    output, scores = windowed(x, padding_mask=padding, return_attention_scores=True)
    real = padding
    np.testing.assert_allclose(
        ops.convert_to_numpy(output)[real],
        ops.convert_to_numpy(expected)[real],
        atol=1e-5,
    )
    assert tuple(scores.shape) == (2, 2, 11, 11)
    np.testing.assert_allclose(
        ops.convert_to_numpy(scores)[0],
        ops.convert_to_numpy(expected_scores)[0],
        atol=1e-6,
    )


def test_windowed_decoder_block_caches_like_its_full_pass():
    rng = np.random.default_rng(5)
    block = DecoderBlock(**BLOCK_ARGS, attention_settings={"window": 2})
    y = rng.normal(size=(2, 7, 8)).astype("float32")
    x = rng.normal(size=(2, 5, 8)).astype("float32")
    full = ops.convert_to_numpy(block(y, x))
    cache = block.init_cache(x, rows=7)
    steps = []
    for index in range(7):
        output, cache = block(
            y[:, index : index + 1], cache=cache, cache_update_index=index
        )
        steps.append(ops.convert_to_numpy(output))
    np.testing.assert_allclose(np.concatenate(steps, 1), full, atol=1e-5)
    # A token more than 2 positions back no longer matters.
    y_changed = y.copy()
    y_changed[:, 0] += 10.0
    changed = ops.convert_to_numpy(block(y_changed, x))
    np.testing.assert_allclose(changed[:, 3:], full[:, 3:], atol=1e-5)
    assert not np.allclose(changed[:, :3], full[:, :3])


def test_bad_attention_window():
    with pytest.raises(ValueError, match="attention_settings.window=0"):
        EncoderBlock(num_heads=2, d_ff=8, attention_settings={"window": 0})

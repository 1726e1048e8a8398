"""Relative position representations (Shaw et al., 2018) in self-attention:
a NumPy float64 reference of Eqs. 3-5, cached and beam decoding against the
uncached pass, the local layers against dense attention, bad arguments."""

from __future__ import annotations

import numpy as np
import pytest
from keras import ops

from keras_transformer.layers import (
    LocalAttention2D,
    LocalBlockAttention,
    MultiHeadAttention,
    RestrictedMultiHeadAttention,
)
from keras_transformer.layers.attention import relative_position_index
from keras_transformer.layers.local_attention import (
    local_block_attention_mask,
    restricted_attention_mask,
)
from tests.layer_testing import run_layer_test

HEADS, KEY_DIM, VALUE_DIM, D_MODEL = 2, 4, 3, 6


def _numpy(x: object) -> np.ndarray:
    """`x` as NumPy (the output of an attention layer's `AttentionResult`)."""
    return np.asarray(ops.convert_to_numpy(getattr(x, "output", x)))


def shaw_reference(
    x: np.ndarray, weights: dict[str, np.ndarray], k: int, causal: bool
) -> np.ndarray:
    """Shaw et al. (2018), written from the paper's text, float64, loops.

    Eq. 4: e_ij = x_i W^Q (x_j W^K + a^K_ij)^T / sqrt(d_z);
    Eq. 2: alpha_ij = softmax_j(e_ij) (over the allowed j);
    Eq. 3: z_i = sum_j alpha_ij (x_j W^V + a^V_ij);
    §3.2: a^K_ij = w^K_clip(j - i, k), clip(x, k) = max(-k, min(k, x));
    the heads are concatenated and projected as in Vaswani et al., Eq. 2.
    """
    x = x.astype("float64")
    w = {name: value.astype("float64") for name, value in weights.items()}
    batch, length, _ = x.shape
    heads_out = np.zeros((batch, length, HEADS, VALUE_DIM))
    for b in range(batch):
        for h in range(HEADS):
            qs, ks = (
                slice(h * KEY_DIM, (h + 1) * KEY_DIM),
                slice(h * KEY_DIM, (h + 1) * KEY_DIM),
            )
            vs = slice(h * VALUE_DIM, (h + 1) * VALUE_DIM)
            q = x[b] @ w["query_kernel"][:, qs] + w["query_bias"][qs]
            key = x[b] @ w["key_kernel"][:, ks] + w["key_bias"][ks]
            v = x[b] @ w["value_kernel"][:, vs] + w["value_bias"][vs]
            for i in range(length):
                allowed = [j for j in range(length) if not causal or j <= i]
                clip = [max(-k, min(k, j - i)) + k for j in allowed]
                e = np.array(
                    [
                        q[i] @ (key[j] + w["relative_key_embeddings"][c])
                        for j, c in zip(allowed, clip, strict=True)
                    ]
                ) / np.sqrt(KEY_DIM)
                alpha = np.exp(e - e.max())
                alpha /= alpha.sum()
                heads_out[b, i, h] = sum(
                    a * (v[j] + w["relative_value_embeddings"][c])
                    for a, j, c in zip(alpha, allowed, clip, strict=True)
                )
    concat = heads_out.reshape(batch, length, HEADS * VALUE_DIM)
    return concat @ w["output_kernel"] + w["output_bias"]


def _layer(cls=MultiHeadAttention, seed: int = 0, **kwargs) -> MultiHeadAttention:
    """A built layer with random weights (biases included)."""
    settings = {"relative_positions": 2, "relative_values": True}
    settings.update(kwargs.pop("settings", {}))
    layer = cls(
        num_heads=HEADS,
        key_dim=KEY_DIM,
        value_dim=VALUE_DIM,
        settings=settings,
        **kwargs,
    )
    layer.build((None, None, D_MODEL), (None, None, D_MODEL))
    rng = np.random.default_rng(seed)
    for variable in layer.weights:
        variable.assign(rng.normal(size=variable.shape).astype(variable.dtype))
    return layer


def _inputs(batch: int = 2, length: int = 7, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.normal(size=(batch, length, D_MODEL)).astype("float32")


def test_index_is_the_clipped_distance():
    index = _numpy(relative_position_index(np.arange(4), np.arange(5), 2))
    # Row i, column j: clip(j - i, -2, 2) + 2.
    assert index.tolist() == [
        [2, 3, 4, 4, 4],
        [1, 2, 3, 4, 4],
        [0, 1, 2, 3, 4],
        [0, 0, 1, 2, 3],
    ]


@pytest.mark.parametrize("causal", [False, True])
def test_layer_equals_shaw_et_al_equations_in_float64(causal):
    """Length 7 > 2k + 1: the clipping is exercised in both directions."""
    layer = _layer(dtype="float64")
    weights = {v.name: _numpy(v) for v in layer.weights}
    assert weights["relative_key_embeddings"].shape == (5, KEY_DIM)
    assert weights["relative_value_embeddings"].shape == (5, VALUE_DIM)
    x = _inputs().astype("float64")
    got = _numpy(layer(x, use_causal_mask=causal))
    expected = shaw_reference(x, weights, 2, causal)
    # The logits are accumulated in float32 (see scaled_dot_product_attention).
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    # And the relative terms matter: without them the output differs.
    plain = shaw_reference(
        x,
        {
            **weights,
            "relative_key_embeddings": 0 * weights["relative_key_embeddings"],
            "relative_value_embeddings": 0 * weights["relative_value_embeddings"],
        },
        2,
        causal,
    )
    assert np.abs(plain - expected).max() > 1e-2


def test_keys_only_creates_no_value_embeddings():
    layer = _layer(settings={"relative_values": False})
    names = [v.name for v in layer.weights]
    assert "relative_key_embeddings" in names
    assert "relative_value_embeddings" not in names
    off = MultiHeadAttention(num_heads=HEADS, key_dim=KEY_DIM)
    off.build((None, None, D_MODEL))
    assert not any("relative" in v.name for v in off.weights)
    assert len(off.weights) == 8


def test_layer_contract(tmp_path):
    x = _inputs(length=5)
    run_layer_test(
        MultiHeadAttention,
        {
            "num_heads": HEADS,
            "key_dim": KEY_DIM,
            "settings": {"relative_positions": 3, "relative_values": True},
        },
        [x],
        (2, 5, D_MODEL),
        tmp_path,
        expected_num_weights=10,
    )


@pytest.mark.parametrize("grow", [False, True])
def test_cached_greedy_decoding_equals_the_uncached_pass(grow):
    """With a fixed-size cache, or one that grows by a row before each step."""
    layer = _layer()
    x = _inputs()
    full = _numpy(layer(x, use_causal_mask=True))
    length = x.shape[1]
    cache = layer.empty_cache(x.shape[0], 1 if grow else length)
    for t in range(length):
        if grow and t:
            cache = tuple(
                np.concatenate([c, np.zeros_like(c[:, :, :1])], 2)
                for c in map(_numpy, cache)
            )
        output, _, cache = layer(
            x[:, t : t + 1],
            cache=cache,
            cache_update_index=t,
            use_causal_mask=True,
        )
        np.testing.assert_allclose(_numpy(output)[:, 0], full[:, t], atol=1e-5)


def test_beam_decoding_equals_each_hypothesis_uncached_pass():
    """Beam slot j of position t sits at cache row t * beam + j: each
    hypothesis, restricted to its own slots, sees relative distances of
    positions, not of rows."""
    layer = _layer()
    batch, beam, length = 2, 3, 6
    rng = np.random.default_rng(2)
    hypotheses = rng.normal(size=(batch, beam, length, D_MODEL)).astype("float32")
    full = [_numpy(layer(hypotheses[:, j], use_causal_mask=True)) for j in range(beam)]
    cache = layer.empty_cache(batch, length * beam)
    rows = np.arange(length * beam)
    # (batch, beam, rows): hypothesis j reads the rows of slot j.
    own_slots = np.broadcast_to(
        rows % beam == np.arange(beam)[:, None], (batch, beam, length * beam)
    )
    for t in range(length):
        output, _, cache = layer(
            hypotheses[:, :, t],
            cache=cache,
            cache_update_index=t * beam,
            positions=(np.full(beam, t, "int32"), (rows // beam).astype("int32")),
            attention_mask=own_slots,
            use_causal_mask=True,
        )
        for j in range(beam):
            np.testing.assert_allclose(_numpy(output)[:, j], full[j][:, t], atol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
def test_restricted_attention_equals_dense_attention_on_its_band(causal):
    dense = _layer()
    restricted = _layer(RestrictedMultiHeadAttention, window=2, block_size=3)
    restricted.set_weights(dense.get_weights())
    x = _inputs(length=8)
    band = restricted_attention_mask(8, 2, causal=causal)
    expected = _numpy(dense(x, attention_mask=band[None], use_causal_mask=causal))
    got = _numpy(restricted(x, use_causal_mask=causal))
    np.testing.assert_allclose(got, expected, atol=1e-5)
    # Cached decoding of the restricted layer (a window of the cache).
    if causal:
        cache = restricted.empty_cache(2, 8)
        for t in range(8):
            output, _, cache = restricted(
                x[:, t : t + 1], cache=cache, cache_update_index=t, use_causal_mask=True
            )
            np.testing.assert_allclose(_numpy(output)[:, 0], got[:, t], atol=1e-5)


def test_local_1d_attention_equals_dense_attention_and_its_cache():
    dense = _layer()
    local = _layer(LocalBlockAttention, query_block_length=3, memory_length=2)
    local.set_weights(dense.get_weights())
    x = _inputs(length=9)
    memory = local_block_attention_mask(9, 3, 2, causal=True)
    expected = _numpy(dense(x, attention_mask=memory[None]))
    got = _numpy(local(x, use_causal_mask=True))
    np.testing.assert_allclose(got, expected, atol=1e-5)
    cache = local.empty_cache(2, 9)
    for t in range(9):
        output, _, cache = local(
            x[:, t : t + 1], cache=cache, cache_update_index=t, use_causal_mask=True
        )
        np.testing.assert_allclose(_numpy(output)[:, 0], got[:, t], atol=1e-5)


def test_a_cache_without_positions_is_refused():
    layer = _layer()
    cache = layer.empty_cache(2, 3)
    with pytest.raises(ValueError, match="needs the positions") as error:
        layer.call(_inputs(length=1), cache=cache)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"relative_positions": -1}, "relative_positions` must be a positive"),
        ({"relative_positions": 0}, "relative_positions` must be a positive"),
        ({"relative_positions": 2.0}, "relative_positions=2.0"),
        ({"relative_positions": "4"}, "relative_positions` must be a positive"),
        ({"relative_values": True}, "needs `attention_settings.relative_positions`"),
        ({"relative_positions": 2, "relative_values": 1}, "relative_values` must"),
    ],
)
def test_bad_arguments_get_one_line(kwargs, message):
    with pytest.raises(ValueError, match=message) as error:
        MultiHeadAttention(num_heads=2, key_dim=4, settings=kwargs)
    assert "\n" not in str(error.value)


def test_local_2d_attention_refuses_relative_positions():
    with pytest.raises(ValueError, match="LocalAttention2D does not take") as error:
        LocalAttention2D(
            num_heads=2,
            key_dim=4,
            query_block=(2, 2),
            memory_flange=(1, 1),
            settings={"relative_positions": 2},
        )
    assert "\n" not in str(error.value)


def test_mixed_precision_outputs_are_finite():
    layer = _layer(dtype="mixed_float16")
    output = layer(_inputs(), use_causal_mask=True).output
    assert output.dtype == "float16"
    assert np.all(np.isfinite(_numpy(output)))

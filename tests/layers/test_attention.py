"""MultiHeadAttention and Eq. 1, against NumPy and the mask contract."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_transformer.layers import MultiHeadAttention, ScaledEmbedding
from keras_transformer.layers.attention import scaled_dot_product_attention
from tests.layer_testing import run_layer_test


def numpy_softmax(x):
    x = x - x.max(-1, keepdims=True)
    e = np.exp(x)
    return e / e.sum(-1, keepdims=True)


def numpy_attention(q, k, v, mask=None):
    """Eq. 1 in NumPy, float64."""
    logits = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if mask is not None:
        logits = np.where(mask, logits, -np.inf)
    weights = numpy_softmax(logits)
    return weights @ v, weights


def test_layer_contract(tmp_path):
    x = np.random.rand(2, 5, 8).astype("float32")
    y = np.random.rand(2, 7, 6).astype("float32")
    run_layer_test(
        MultiHeadAttention,
        {
            "num_heads": 2,
            "key_dim": 4,
            "value_dim": 3,
            "settings": {"dropout": 0.1, "num_key_value_heads": 1},
        },
        [x, y],
        (2, 5, 8),
        tmp_path,
        expected_num_weights=8,
    )


def test_equation_1_matches_numpy():
    rng = np.random.default_rng(0)
    q = rng.normal(size=(2, 3, 4, 8)).astype("float32")
    k = rng.normal(size=(2, 3, 6, 8)).astype("float32")
    v = rng.normal(size=(2, 3, 6, 5)).astype("float32")
    mask = rng.random((2, 1, 4, 6)) > 0.3
    mask[..., 0] = True  # every row keeps at least one key
    output, weights = scaled_dot_product_attention(q, k, v, mask)
    expected_output, expected_weights = numpy_attention(
        q.astype("float64"), k.astype("float64"), v.astype("float64"), mask
    )
    np.testing.assert_allclose(
        ops.convert_to_numpy(weights), expected_weights, atol=1e-6
    )
    np.testing.assert_allclose(ops.convert_to_numpy(output), expected_output, atol=1e-5)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_fully_masked_row_gives_zeros_not_nan(dtype):
    q = np.full((1, 2, 4), 300.0, dtype)  # large logits in float16 too
    k = np.full((1, 3, 4), 300.0, dtype)
    v = np.ones((1, 3, 4), dtype)
    mask = np.array([[[True, False, True], [False, False, False]]])
    output, weights = scaled_dot_product_attention(q, k, v, mask)
    output, weights = ops.convert_to_numpy(output), ops.convert_to_numpy(weights)
    assert np.all(np.isfinite(output))
    np.testing.assert_array_equal(weights[0, 1], 0.0)
    np.testing.assert_array_equal(output[0, 1], 0.0)
    np.testing.assert_allclose(weights[0, 0], [0.5, 0.0, 0.5], atol=1e-3)


def test_equations_2_and_3_with_known_weights():
    """MultiHead(Q, K, V) = Concat(head_1..head_h) W^O against a NumPy loop."""
    rng = np.random.default_rng(1)
    heads, d_k, d_v, d_model = 3, 4, 5, 6
    layer = MultiHeadAttention(num_heads=heads, key_dim=d_k, value_dim=d_v)
    query = rng.normal(size=(2, 4, d_model)).astype("float32")
    value = rng.normal(size=(2, 7, d_model)).astype("float32")
    layer(query, value)
    weights = [rng.normal(size=w.shape).astype("float32") for w in layer.weights]
    layer.set_weights(weights)
    w_q, w_k, w_v, w_o, b_q, b_k, b_v, b_o = weights
    output = ops.convert_to_numpy(layer(query, value).output)

    q = query @ w_q + b_q
    k = value @ w_k + b_k
    v = value @ w_v + b_v
    head_outputs = []
    for i in range(heads):
        head, _ = numpy_attention(
            q[..., i * d_k : (i + 1) * d_k],
            k[..., i * d_k : (i + 1) * d_k],
            v[..., i * d_v : (i + 1) * d_v],
        )
        head_outputs.append(head)
    expected = np.concatenate(head_outputs, -1) @ w_o + b_o
    np.testing.assert_allclose(output, expected, rtol=1e-4, atol=1e-4)


def test_cross_attention_scores_have_correct_symbolic_shape():
    query = keras.Input((5, 8))
    value = keras.Input((9, 8))
    output, scores, cache = MultiHeadAttention(num_heads=2, key_dim=4)(query, value)
    assert tuple(scores.shape) == (None, 2, 5, 9)
    assert cache == ()
    model = keras.Model([query, value], [output, scores])
    real_output, real_scores = model([np.ones((3, 5, 8)), np.ones((3, 9, 8))])
    assert tuple(real_scores.shape) == (3, 2, 5, 9)
    assert tuple(real_output.shape) == (3, 5, 8)


def _output(result):
    """The output of an attention layer's `AttentionResult`, as NumPy."""
    return ops.convert_to_numpy(result.output)


def test_implicit_mask_equals_explicit_mask():
    ids = np.array([[4, 5, 6, 0, 0], [7, 8, 0, 0, 0]])
    embedding = ScaledEmbedding(20, 8, mask_zero=True)
    attention = MultiHeadAttention(num_heads=2, key_dim=4)
    hidden = embedding(ids)
    implicit = _output(attention(hidden, hidden))
    real = ids != 0
    explicit_mask = real[:, :, None] & real[:, None, :]
    explicit = _output(
        attention(ops.convert_to_numpy(hidden), hidden, attention_mask=explicit_mask)
    )
    np.testing.assert_allclose(implicit, explicit, atol=1e-6)


def test_padded_keys_do_not_change_real_outputs():
    rng = np.random.default_rng(2)
    attention = MultiHeadAttention(num_heads=2, key_dim=4)
    x = rng.normal(size=(1, 6, 8)).astype("float32")
    padding = np.array([[True, True, True, True, False, False]])
    first = _output(attention(x, x, value_mask=padding))
    x_changed = x.copy()
    x_changed[:, 4:] = rng.normal(size=(1, 2, 8)) * 100
    second = _output(attention(x_changed, x_changed, value_mask=padding))
    np.testing.assert_allclose(first[:, :4], second[:, :4], atol=1e-5)


def test_causal_mask_hides_the_future():
    rng = np.random.default_rng(3)
    attention = MultiHeadAttention(num_heads=2, key_dim=4)
    x = rng.normal(size=(1, 6, 8)).astype("float32")
    first = _output(attention(x, x, use_causal_mask=True))
    x_changed = x.copy()
    x_changed[:, 3] += 5.0
    second = _output(attention(x_changed, x_changed, use_causal_mask=True))
    np.testing.assert_allclose(first[:, :3], second[:, :3], atol=1e-6)
    assert not np.allclose(first[:, 3:], second[:, 3:])


def test_attention_dropout_only_in_training():
    attention = MultiHeadAttention(num_heads=2, key_dim=4, settings={"dropout": 0.5})
    x = np.random.rand(2, 6, 8).astype("float32")
    inference = [_output(attention(x, x, training=False)) for _ in range(2)]
    np.testing.assert_array_equal(inference[0], inference[1])
    training = _output(attention(x, x, training=True))
    assert not np.allclose(training, inference[0])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_heads": 0, "key_dim": 4}, "num_heads=0"),
        ({"num_heads": 2, "key_dim": -1}, "key_dim=-1"),
        ({"num_heads": 2, "key_dim": 4, "settings": {"dropout": 1.5}}, "dropout=1.5"),
        ({"num_heads": 2.0, "key_dim": 4}, "num_heads=2.0"),
        ({"num_heads": 2, "key_dim": 4, "settings": {"windows": 2}}, "windows"),
        (
            {"num_heads": 4, "key_dim": 4, "settings": {"num_key_value_heads": 3}},
            r"^`attention_settings.num_key_value_heads=3` must divide num_heads=4 ",
        ),
    ],
)
def test_bad_arguments_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message) as error:
        MultiHeadAttention(**kwargs)
    assert "\n" not in str(error.value)


def test_masks_of_the_wrong_rank_are_refused():
    attention = MultiHeadAttention(num_heads=2, key_dim=4)
    x = np.ones((2, 3, 8), "float32")
    with pytest.raises(ValueError, match="attention_mask"):
        attention(x, x, attention_mask=np.ones((2, 1, 3, 3), bool))
    with pytest.raises(ValueError, match="rank 2"):
        attention(x, x, value_mask=np.ones((2, 3, 1), bool))
    with pytest.raises(ValueError, match="rank 3"):
        MultiHeadAttention(num_heads=2, key_dim=4)(np.ones((3, 8)), np.ones((3, 8)))


def test_masks_of_other_lengths_are_refused_by_name():
    """A padding mask passed as `attention_mask` failed inside the softmax
    ("condition [1,1,2,5] ... must be broadcastable")."""
    attention = MultiHeadAttention(num_heads=2, key_dim=4)
    x, memory = np.ones((2, 5, 8), "float32"), np.ones((2, 7, 8), "float32")
    attention(x, memory)
    for shape in ((2, 5), (2, 5, 5), (5, 5), (5, 7), (2, 1, 5, 7)):
        mask = np.ones(shape, bool)
        with pytest.raises(ValueError) as error:
            attention(x, memory, attention_mask=mask)
        assert (
            "`attention_mask` must be (batch, query_length, key_length), here "
            "(batch, 5, 7), True where attention is allowed. Received: "
            f"attention_mask.shape={mask.shape}. A padding mask, (batch, length), "
            "goes in `query_mask` or `key_mask` (`value_mask`) instead; a (5, 7) "
            "mask shared by the batch as mask[None]."
        ) in str(error.value)
    with pytest.raises(ValueError, match=r"`key_mask` covers 5 positions but the "):
        attention(x, memory, value_mask=np.ones((2, 5), bool))
    with pytest.raises(ValueError, match=r"`query_mask` covers 7 .* query sequence"):
        attention(x, memory, query_mask=np.ones((2, 7), bool))
    # The shapes it takes.
    attention(x, memory, attention_mask=np.ones((2, 5, 7), bool))
    attention(x, memory, attention_mask=np.ones((1, 5, 7), bool))


def test_float_masks_are_refused_with_the_way_to_say_what_they_mean():
    """A float mask was cast to bool: an additive one (0 where allowed, -1e9
    where not, as in the TensorFlow tutorial) attended exactly where it was
    told not to, without a word. Boolean and 0/1 integer masks compute."""
    attention = MultiHeadAttention(num_heads=2, key_dim=4)
    x = np.random.default_rng(0).normal(size=(2, 3, 8)).astype("float32")
    allowed = np.tril(np.ones((3, 3), bool))[None].repeat(2, 0)
    additive = np.where(allowed, 0.0, -1e9).astype("float32")
    for name, mask in (
        ("attention_mask", additive),
        ("key_mask", allowed[:, -1].astype("float32")),
        ("query_mask", allowed[:, -1].astype("float16")),
    ):
        with pytest.raises(ValueError) as error:
            attention(x, x, **{name: mask})
        message = str(error.value)
        assert f"`{name}` must be boolean (or integers 0 and 1)" in message
        # Keras casts float call arguments to the layer's compute dtype.
        assert f"{name}.dtype=float32" in message
        assert "`mask == 0` for an additive mask" in message
    by_bool = attention(x, x, attention_mask=allowed).output
    by_int = attention(x, x, attention_mask=allowed.astype("int32")).output
    by_additive_read = attention(x, x, attention_mask=additive == 0).output
    np.testing.assert_allclose(by_bool, by_int)
    np.testing.assert_allclose(by_bool, by_additive_read)
    causal = attention(x, x, use_causal_mask=True).output
    np.testing.assert_allclose(by_bool, causal, atol=1e-6)
    # Eq. 1 by itself, as the function the layers call.
    with pytest.raises(ValueError, match=r"`mask` must be boolean .*=float32"):
        scaled_dot_product_attention(x, x, x, mask=additive)


def test_masks_given_as_python_lists_are_refused_with_the_conversion():
    """A list mask failed inside the layer with "'list' object has no
    attribute 'shape'"; it is named, with the conversion that computes."""
    attention = MultiHeadAttention(num_heads=2, key_dim=4)
    x = np.random.default_rng(0).normal(size=(1, 3, 8)).astype("float32")
    causal = [[[True, False, False], [True, True, False], [True, True, True]]]
    for name, mask in (
        ("attention_mask", causal),
        ("key_mask", [[1, 1, 0]]),
        ("query_mask", [[True, True, False]]),
    ):
        with pytest.raises(TypeError) as error:
            attention(x, x, **{name: mask})
        message = str(error.value)
        assert f"`{name}` must be a tensor or NumPy array of booleans" in message
        assert f"{name} of type list. Pass np.asarray({name}, dtype=bool)" in message
    np.testing.assert_allclose(
        attention(x, x, attention_mask=np.asarray(causal, dtype=bool)).output,
        attention(x, x, use_causal_mask=True).output,
        atol=1e-6,
    )
    with pytest.raises(TypeError, match="`mask` must be a tensor or NumPy array"):
        scaled_dot_product_attention(x, x, x, mask=causal)


def test_a_padding_mask_given_as_attention_mask_is_refused_whatever_its_batch():
    """A `(batch, length)` padding mask passed as `attention_mask`, where the
    batch equals the query length, was taken for a `(query_length,
    key_length)` mask: query `i` attended as sentence `i`'s padding allowed,
    without a word. Two-dimensional attention masks are refused."""
    attention = MultiHeadAttention(num_heads=2, key_dim=4)
    x = np.random.default_rng(0).normal(size=(3, 3, 8)).astype("float32")
    padding = np.array([[1, 1, 1], [1, 1, 0], [1, 0, 0]], bool)
    with pytest.raises(ValueError, match="goes in `query_mask` or `key_mask`"):
        attention(x, x, attention_mask=padding)
    # Given where it belongs, and as a shared mask, it computes.
    by_key = attention(x, x, key_mask=padding).output
    shared = attention(x, x, attention_mask=padding[None]).output
    assert not np.allclose(by_key, shared)


def test_inputs_of_other_batches_lengths_or_widths_are_refused_by_name():
    """They failed inside a matrix product with TensorFlow's error ("In[0]
    and In[1] must have compatible batch dimensions", "Input to reshape is a
    tensor with 84 values")."""
    attention = MultiHeadAttention(num_heads=2, key_dim=4, name="attention")
    x, memory = np.ones((2, 5, 8), "float32"), np.ones((2, 7, 6), "float32")
    assert attention(x, memory).output.shape == (2, 5, 8)
    refusals = {
        "attention's inputs hold different numbers of sequences: pass one value "
        "(and key) sequence per query sequence. Received: query.shape=(2, 5, 8), "
        "value.shape=(3, 7, 6)": (x, np.ones((3, 7, 6), "float32")),
        "`key` and `value` must have the same length (one value per key). "
        "Received: query.shape=(2, 5, 8), value.shape=(2, 7, 6), "
        "key.shape=(2, 4, 6)": (x, memory, np.ones((2, 4, 6), "float32")),
        "`value` has 8 features but attention was built for 6; call it with "
        "inputs of the width it was built with. Received: query.shape=(2, 5, 8), "
        "value.shape=(2, 7, 8)": (x, np.ones((2, 7, 8), "float32")),
        "`query` (as the value) has 8 features but attention was built for 6": (x,),
        "`query` has 6 features but attention was built for 8": (memory, memory),
    }
    for message, inputs in refusals.items():
        with pytest.raises(ValueError) as error:
            attention(*inputs)
        assert message in str(error.value)


def test_float16_padding_stays_finite():
    attention = MultiHeadAttention(num_heads=2, key_dim=4, dtype="mixed_float16")
    x = np.random.rand(2, 5, 8).astype("float32") * 50
    padding = np.array([[1, 1, 1, 0, 0], [1, 0, 0, 0, 0]], bool)
    output, scores, _ = attention(x, x, query_mask=padding, value_mask=padding)
    assert keras.backend.standardize_dtype(output.dtype) == "float16"
    assert keras.backend.standardize_dtype(scores.dtype) == "float32"
    assert np.all(np.isfinite(ops.convert_to_numpy(output)))


@pytest.mark.parametrize("kv_heads", [None, 1])
def test_cached_self_attention_equals_causal_attention(kv_heads):
    """Fixed-size cache written at an index: same outputs as the full pass
    (multi-head, and multi-query attention with one key/value head)."""
    rng = np.random.default_rng(4)
    attention = MultiHeadAttention(
        num_heads=2, key_dim=4, settings={"num_key_value_heads": kv_heads}
    )
    x = rng.normal(size=(2, 6, 8)).astype("float32")
    full = _output(attention(x, x, use_causal_mask=True))
    cache = attention.empty_cache(2, 9)
    assert tuple(cache[0].shape) == (2, kv_heads or 2, 9, 4)
    outputs = []
    for index in range(6):
        output, scores, cache = attention(
            x[:, index : index + 1],
            cache=cache,
            cache_update_index=index,
            use_causal_mask=True,
        )
        outputs.append(ops.convert_to_numpy(output))
        # Unused cache slots get no weight.
        np.testing.assert_array_equal(ops.convert_to_numpy(scores)[..., index + 1 :], 0)
    np.testing.assert_allclose(np.concatenate(outputs, 1), full, atol=1e-5)


def _grown(cache, rows):
    """`cache` with `rows` zero rows appended (what a growing search does)."""
    return tuple(np.concatenate([c, np.zeros_like(c[:, :, :rows])], 2) for c in cache)


def test_grown_cache_equals_the_fixed_size_cache():
    """A cache that grows by the step's rows before each call (a TensorFlow
    graph search): same outputs, and a cache that holds exactly the
    positions seen so far."""
    rng = np.random.default_rng(6)
    attention = MultiHeadAttention(num_heads=2, key_dim=4)
    x = rng.normal(size=(2, 5, 8)).astype("float32")
    full = _output(attention(x, x, use_causal_mask=True))
    cache = tuple(ops.convert_to_numpy(c) for c in attention.empty_cache(2, 1))
    for index in range(5):
        output, _, cache = attention(
            x[:, index : index + 1],
            cache=cache if index == 0 else _grown(cache, 1),
            cache_update_index=index,
            use_causal_mask=True,
        )
        cache = tuple(ops.convert_to_numpy(c) for c in cache)
        assert tuple(cache[1].shape) == (2, 2, index + 1, 4)
        np.testing.assert_allclose(
            ops.convert_to_numpy(output)[:, 0], full[:, index], atol=1e-5
        )


@pytest.mark.parametrize("grow", [False, True])
def test_beam_layout_keeps_each_hypothesis_history(grow):
    """Slot j of position t is row t * beam + j (the search's layout, told
    to the layer by the row it writes and the mask): hypotheses that follow
    their own slots see exactly their own sequence."""
    rng = np.random.default_rng(8)
    attention = MultiHeadAttention(num_heads=2, key_dim=4)
    beam, steps = 3, 4
    # (batch * beam, steps, 8): one sequence per hypothesis.
    x = rng.normal(size=(2, beam, steps, 8)).astype("float32")
    flat = x.reshape(2 * beam, steps, 8)
    full = _output(attention(flat, flat, use_causal_mask=True))
    full = full.reshape(2, beam, steps, -1)
    cache = attention.empty_cache(2, (1 if grow else steps) * beam)
    for index in range(steps):
        rows = (index + 1 if grow else steps) * beam
        if grow and index:
            cache = _grown(tuple(ops.convert_to_numpy(c) for c in cache), beam)
        # Hypothesis k: slot k of every position up to `index`.
        history = (np.arange(rows) % beam == np.arange(beam)[:, None]) & (
            np.arange(rows) // beam <= index
        )
        output, scores, cache = attention(
            x[:, :, index],
            cache=cache,
            cache_update_index=index * beam,
            attention_mask=np.broadcast_to(history, (2, beam, rows)),
        )
        assert tuple(scores.shape) == (2, 2, beam, rows)
        np.testing.assert_allclose(
            ops.convert_to_numpy(output), full[:, :, index], atol=1e-5
        )


def test_cross_attention_keys_and_values_are_computed_once():
    rng = np.random.default_rng(5)
    attention = MultiHeadAttention(num_heads=2, key_dim=4)
    query = rng.normal(size=(2, 3, 8)).astype("float32")
    memory = rng.normal(size=(2, 5, 8)).astype("float32")
    padding = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], bool)
    full = _output(attention(query, memory, value_mask=padding))
    cache = attention.project_key_value(memory)
    assert tuple(cache[0].shape) == (2, 2, 5, 4)
    for index in range(3):
        # No `cache_update_index`: the cache is read, never written.
        step, _, unchanged = attention(
            query[:, index : index + 1], cache=cache, key_mask=padding
        )
        assert unchanged[0] is cache[0]
        np.testing.assert_allclose(
            ops.convert_to_numpy(step), full[:, index : index + 1], atol=1e-5
        )


def test_self_attention_without_value_equals_value_equal_to_query():
    """`value=None` projects the query once for Q, K and V (one product)."""
    attention = MultiHeadAttention(num_heads=2, key_dim=4)
    x = np.random.default_rng(9).normal(size=(2, 5, 8)).astype("float32")
    np.testing.assert_allclose(
        _output(attention(x, use_causal_mask=True)),
        _output(attention(x, x, use_causal_mask=True)),
        atol=1e-6,
    )


@pytest.mark.parametrize(
    "arguments",
    [{"cache_update_index": 0}, {"positions": (np.arange(2), np.arange(2))}],
)
def test_cache_arguments_need_a_cache(arguments):
    attention = MultiHeadAttention(num_heads=2, key_dim=4)
    x = np.ones((1, 2, 8), "float32")
    with pytest.raises(ValueError, match="need a cache"):
        attention(x, x, **arguments)


def test_grouped_query_attention_with_as_many_kv_heads_is_multi_head_attention():
    """`num_key_value_heads == num_heads` is multi-head attention: the same
    variables, and with the same weights exactly the same outputs."""
    x = np.random.default_rng(10).normal(size=(2, 5, 8)).astype("float32")
    plain = MultiHeadAttention(num_heads=4, key_dim=2)
    grouped = MultiHeadAttention(
        num_heads=4, key_dim=2, settings={"num_key_value_heads": 4}
    )
    plain(x), grouped(x)
    grouped.set_weights(plain.get_weights())
    for value in (None, x):
        np.testing.assert_array_equal(
            _output(grouped(x, value, use_causal_mask=True)),
            _output(plain(x, value, use_causal_mask=True)),
        )


@pytest.mark.parametrize("kv_heads", [1, 2])
def test_grouped_query_attention_equals_multi_head_attention_with_shared_heads(
    kv_heads,
):
    """Ainslie et al. (2023): key/value head j serves query heads j * g ...
    (j + 1) * g - 1. Multi-head attention whose key and value heads repeat
    the grouped ones gives the same outputs and weights."""
    x = np.random.default_rng(11).normal(size=(2, 5, 8)).astype("float32")
    heads, groups = 4, 4 // kv_heads
    grouped = MultiHeadAttention(
        num_heads=heads, key_dim=2, settings={"num_key_value_heads": kv_heads}
    )
    plain = MultiHeadAttention(num_heads=heads, key_dim=2)
    grouped(x), plain(x)
    assert tuple(grouped.key_kernel.shape) == (8, kv_heads * 2)

    def repeated(weight):  # (..., kv_heads * 2) -> (..., heads * 2)
        weight = ops.convert_to_numpy(weight)
        split = weight.reshape(*weight.shape[:-1], kv_heads, 1, 2)
        return np.broadcast_to(
            split, (*weight.shape[:-1], kv_heads, groups, 2)
        ).reshape(*weight.shape[:-1], heads * 2)

    for name in ("query_kernel", "output_kernel", "query_bias", "output_bias"):
        getattr(plain, name).assign(getattr(grouped, name))
    for name in ("key_kernel", "value_kernel", "key_bias", "value_bias"):
        getattr(plain, name).assign(repeated(getattr(grouped, name)))
    expected, expected_scores, _ = plain(x, use_causal_mask=True)
    output, scores, _ = grouped(x, use_causal_mask=True)
    np.testing.assert_allclose(
        ops.convert_to_numpy(output), ops.convert_to_numpy(expected), atol=1e-5
    )
    np.testing.assert_allclose(
        ops.convert_to_numpy(scores), ops.convert_to_numpy(expected_scores), atol=1e-6
    )


def test_single_key_takes_all_weight_unless_masked():
    q = np.ones((1, 2, 4), "float32")
    k = v = np.full((1, 1, 4), 2.0, "float32")
    _, weights = scaled_dot_product_attention(q, k, v)
    np.testing.assert_array_equal(ops.convert_to_numpy(weights), 1.0)
    mask = np.array([[[True], [False]]])
    output, weights = scaled_dot_product_attention(q, k, v, mask)
    np.testing.assert_array_equal(ops.convert_to_numpy(weights)[0, :, 0], [1.0, 0.0])
    np.testing.assert_array_equal(ops.convert_to_numpy(output)[0, 1], 0.0)


def test_fused_self_attention_projection_equals_separate_projections():
    attention = MultiHeadAttention(num_heads=2, key_dim=4, value_dim=3)
    x = np.random.rand(2, 5, 8).astype("float32")
    attention(x, x)
    queries, keys, values = attention.project_self_attention(x)
    expected_keys, expected_values = attention.project_key_value(x)
    for fused, separate in (
        (queries, attention.project_query(x)),
        (keys, expected_keys),
        (values, expected_values),
    ):
        assert tuple(fused.shape) == tuple(separate.shape)
        np.testing.assert_allclose(
            ops.convert_to_numpy(fused), ops.convert_to_numpy(separate), atol=1e-6
        )


@pytest.mark.tensorflow_only  # traced tf.function graphs
def test_reshape_target_makes_the_one_unknown_size_minus_one():
    import tensorflow as tf

    from keras_transformer.backend.portable import reshape_target

    seen = {}

    @tf.function(input_signature=[tf.TensorSpec((None, 3, 8))])
    def one_unknown(x):
        seen["one"] = reshape_target(x, 2)
        return x

    @tf.function(input_signature=[tf.TensorSpec((None, None, 8))])
    def two_unknown(x):
        target = reshape_target(x, 2)
        seen["two"] = target
        return ops.reshape(x, (*target, 2, 4))

    one_unknown.get_concrete_function()
    assert seen["one"] == (-1, 3)
    assert tuple(two_unknown(tf.zeros((2, 0, 8))).shape) == (2, 0, 2, 4)
    assert all(isinstance(size, tf.Tensor) for size in seen["two"])
    assert reshape_target(np.zeros((2, 5, 8), "float32"), 2) == (2, 5)


@pytest.mark.tensorflow_only  # traced tf.function graphs
def test_a_decoding_step_splits_and_merges_heads_without_shape_ops():
    """With the batch the only size unknown when traced (one decoding
    step), the reshapes of the head split and merge are constants: the
    traced graph reads no shape, and the result equals the eager one."""
    import tensorflow as tf

    attention = MultiHeadAttention(num_heads=2, key_dim=4)
    x = np.random.rand(3, 1, 8).astype("float32")
    attention(x, x)

    def step(inputs):
        queries, keys, values = attention.project_self_attention(inputs)
        return attention.combine_heads(queries + keys + values)

    traced = tf.function(step, input_signature=[tf.TensorSpec((None, 1, 8))])
    graph = traced.get_concrete_function().graph
    assert "Shape" not in {op.type for op in graph.get_operations()}
    np.testing.assert_allclose(
        traced(x).numpy(), ops.convert_to_numpy(step(x)), rtol=1e-6, atol=1e-6
    )

"""Every TensorFlow twin computes what the package's portable reference does.

For each dispatch function of `keras_transformer.backend`, the twin in
`keras_transformer.backend.tensorflow` is called next to the reference in
`keras_transformer.backend.portable`, and values and gradients (taken by
`tf.GradientTape`) are compared: masked rows, float16 inputs and the
shapes where the twin picks different kernels included. Dropout draws
different random numbers, so it is compared statistically.
"""

import keras
import numpy as np
import pytest

import keras_transformer as kt
from keras_transformer.backend import portable
from tests.backend.helpers import train_embedding_model, values_and_grads

tf = pytest.importorskip("tensorflow")

pytestmark = pytest.mark.tensorflow_only


def _nn():
    from keras_transformer.backend.tensorflow import nn

    return nn


def _tf_optimizers():
    from keras_transformer.backend.tensorflow import optimizers

    return optimizers


def _tf_losses():
    from keras_transformer.backend.tensorflow import losses

    return losses


def _assert_twins_agree(twin, reference, inputs, upstream, rtol, atol):
    """Values and the gradients of every input agree."""
    ours = values_and_grads(twin, *inputs, upstream=upstream)
    theirs = values_and_grads(reference, *inputs, upstream=upstream)
    assert ours[0].shape == theirs[0].shape
    np.testing.assert_allclose(
        np.asarray(ours[0], "float32"), np.asarray(theirs[0], "float32"), rtol, atol
    )
    for a, b in zip(ours[1], theirs[1], strict=True):
        assert a is not None and b is not None
        np.testing.assert_allclose(
            np.asarray(a, "float32"), np.asarray(b, "float32"), rtol, atol
        )
    return ours, theirs


# ----------------------------------------------------------------- linear
@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize(("d_in", "d_out"), [(4, 12), (12, 4), (6, 6)])
def test_linear_twin_equals_portable(d_in, d_out, relu):
    rng = np.random.default_rng(20)
    x = rng.normal(size=(2, 3, d_in)).astype("float32")
    kernel = rng.normal(size=(d_in, d_out)).astype("float32")
    bias = rng.normal(size=(d_out,)).astype("float32")
    upstream = tf.constant(rng.normal(size=(2, 3, d_out)).astype("float32"))
    _assert_twins_agree(
        lambda x, k, b: _nn().linear(x, k, b, relu=relu),
        lambda x, k, b: portable.linear(x, k, b, relu=relu),
        [x, kernel, bias],
        upstream,
        rtol=1e-5,
        atol=1e-5,
    )
    # Without a bias.
    _assert_twins_agree(
        lambda x, k: _nn().linear(x, k, relu=relu),
        lambda x, k: portable.linear(x, k, relu=relu),
        [x, kernel],
        upstream,
        rtol=1e-5,
        atol=1e-5,
    )


def test_linear_twin_equals_portable_in_float16():
    rng = np.random.default_rng(21)
    x = rng.normal(size=(2, 5, 8)).astype("float16")
    # float32 variables, cast to the inputs' dtype by both.
    kernel = rng.normal(size=(8, 16)).astype("float32")
    bias = rng.normal(size=(16,)).astype("float32")
    upstream = tf.constant(rng.normal(size=(2, 5, 16)).astype("float16"))
    ours, _ = _assert_twins_agree(
        lambda x, k, b: _nn().linear(x, k, b, relu=True),
        lambda x, k, b: portable.linear(x, k, b, relu=True),
        [x, kernel, bias],
        upstream,
        rtol=1e-2,
        atol=1e-2,
    )
    assert ours[0].dtype == tf.float16


# ------------------------------------------------------- matmul_transposed
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_matmul_transposed_twin_equals_portable(dtype):
    rng = np.random.default_rng(22)
    hidden = rng.normal(size=(2, 3, 8)).astype(dtype)
    embeddings = rng.normal(size=(11, 8)).astype(dtype)
    upstream = tf.constant(rng.normal(size=(2, 3, 11)).astype(dtype))
    tolerance = 1e-5 if dtype == "float32" else 2e-2
    _assert_twins_agree(
        _nn().matmul_transposed,
        portable.matmul_transposed,
        [hidden, embeddings],
        upstream,
        rtol=tolerance,
        atol=tolerance,
    )


# ------------------------------------------------------------ residual_add
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_residual_add_twin_equals_portable(dtype):
    rng = np.random.default_rng(23)
    x, y = (rng.normal(size=(2, 3, 4)).astype(dtype) for _ in range(2))
    upstream = tf.constant(rng.normal(size=(2, 3, 4)).astype(dtype))
    ours, theirs = _assert_twins_agree(
        _nn().residual_add, portable.residual_add, [x, y], upstream, rtol=0, atol=0
    )
    assert ours[0].dtype == theirs[0].dtype


# -------------------------------------------------------------- layer_norm
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("shape", [(6, 16), (3, 4, 16)])
def test_layer_norm_twin_equals_portable(shape, dtype):
    rng = np.random.default_rng(24)
    x = (rng.normal(size=shape) * 3 + 1).astype(dtype)
    gamma = rng.normal(size=shape[-1:]).astype("float32") + 1
    beta = rng.normal(size=shape[-1:]).astype("float32")
    upstream = tf.constant(rng.normal(size=shape).astype("float32"))
    tolerance = 1e-4 if dtype == "float32" else 2e-2

    def twin(x, gamma, beta):
        return _nn().layer_norm(x, gamma, beta, 1e-6)

    def reference(x, gamma, beta):
        # The twin returns float32, the reference the inputs' dtype; the
        # layer casts both to its compute dtype.
        outputs = portable.layer_norm(x, gamma, beta, -1, 1e-6)
        return tf.cast(outputs, tf.float32)

    ours, _ = _assert_twins_agree(
        twin, reference, [x, gamma, beta], upstream, rtol=tolerance, atol=tolerance
    )
    assert ours[0].dtype == tf.float32


# ---------------------------------------------------------- masked_softmax
def test_masked_softmax_twin_equals_portable_with_masked_rows():
    rng = np.random.default_rng(25)
    logits = rng.normal(size=(2, 3, 4, 5)).astype("float32") * 3
    mask = rng.uniform(size=(2, 1, 4, 5)) > 0.3
    mask[0, 0, 1] = False  # a fully masked row
    mask[1, 0, 2] = True  # a row with every key allowed
    upstream = tf.constant(rng.normal(size=logits.shape).astype("float32"))
    ours, theirs = _assert_twins_agree(
        lambda z: _nn().masked_softmax(z, mask),
        lambda z: portable.masked_softmax(z, mask),
        [logits],
        upstream,
        rtol=1e-5,
        atol=1e-6,
    )
    for values, grads in (ours, theirs):
        values = keras.ops.convert_to_numpy(values)
        np.testing.assert_array_equal(values[0, :, 1], 0.0)
        np.testing.assert_array_equal(values[np.broadcast_to(~mask, values.shape)], 0)
        assert np.all(keras.ops.convert_to_numpy(grads[0])[0, :, 1] == 0)


# ----------------------------------------------------------------- dropout
def test_dropout_twin_and_portable_agree_statistically():
    rate = 0.3
    x = tf.constant(
        np.random.default_rng(26).uniform(1, 2, (999, 1001)).astype("float32")
    )
    results = {}
    for name, function in {
        "twin": lambda x: _nn().dropout(x, rate, keras.random.SeedGenerator(5).next()),
        "portable": lambda x: portable.dropout(
            x, rate, seed=keras.random.SeedGenerator(5)
        ),
    }.items():
        outputs, (grad,) = values_and_grads(function, x)
        results[name] = (
            keras.ops.convert_to_numpy(outputs),
            keras.ops.convert_to_numpy(grad),
        )
    x = keras.ops.convert_to_numpy(x)
    for outputs, grad in results.values():
        dropped = outputs == 0
        # 1,000,000 Bernoulli draws: the standard error is 5e-4.
        assert abs(dropped.mean() - rate) < 3e-3
        # Kept values scaled by about 1 / (1 - rate); the expectation kept.
        scale = outputs[~dropped] / x[~dropped]
        np.testing.assert_allclose(scale, 1 / (1 - rate), rtol=1e-4)
        assert abs(outputs.mean() / x.mean() - 1) < 5e-3
        # d(sum y)/dx is the mask times the scale.
        np.testing.assert_allclose(grad, outputs / x, rtol=1e-6)
    # Different random numbers: different masks.
    assert not np.array_equal(results["twin"][0] == 0, results["portable"][0] == 0)


# -------------------------------------------------------------------- loss
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_label_smoothed_nll_twin_equals_portable(eps, dtype):
    rng = np.random.default_rng(27)
    logits = (rng.normal(size=(3, 4, 11)) * 5).astype(dtype)
    logits[0, 0, 3] = 300.0  # a very confident wrong prediction
    labels = tf.constant(rng.integers(0, 11, (3, 4)), "int32")
    smoothed_up = tf.constant(rng.uniform(size=(3, 4)).astype("float32"))
    nll_up = tf.constant(rng.uniform(size=(3, 4)).astype("float32"))
    tolerance = 1e-5 if dtype == "float32" else 1e-3

    def weighted(function):
        def total(z):
            smoothed, nll = function(labels, z, eps)
            assert smoothed.dtype == nll.dtype == tf.float32
            return tf.reduce_sum(smoothed * smoothed_up) + tf.reduce_sum(nll * nll_up)

        return total

    _assert_twins_agree(
        weighted(_tf_losses().label_smoothed_nll),
        weighted(portable.label_smoothed_nll),
        [logits],
        None,
        rtol=tolerance,
        atol=tolerance,
    )
    # Each output on its own (the other one's gradient is None).
    for index in (0, 1):
        _assert_twins_agree(
            lambda z, i=index: _tf_losses().label_smoothed_nll(labels, z, eps)[i],
            lambda z, i=index: portable.label_smoothed_nll(labels, z, eps)[i],
            [logits],
            None,
            rtol=tolerance,
            atol=tolerance,
        )


def test_masked_loss_with_padding_is_the_same_with_and_without_fast_paths():
    rng = np.random.default_rng(28)
    logits = tf.constant(rng.normal(size=(3, 5, 13)).astype("float32"))
    labels = rng.integers(1, 13, (3, 5))
    labels[0, 3:] = 0  # padded positions
    labels[2, :] = 0  # a fully padded row
    labels = tf.constant(labels, "int32")
    loss = kt.losses.MaskedSparseCrossEntropy(label_smoothing=0.1)
    results = []
    for enabled in (True, False):
        with kt.backend.fast_paths(enabled):
            results.append(values_and_grads(lambda z: loss(labels, z), logits))
    (fast_value, (fast_grad,)), (plain_value, (plain_grad,)) = results
    np.testing.assert_allclose(fast_value, plain_value, rtol=1e-6)
    np.testing.assert_allclose(fast_grad, plain_grad, atol=1e-6)
    # Padded positions get no gradient.
    assert np.all(keras.ops.convert_to_numpy(fast_grad)[2] == 0)
    assert np.all(keras.ops.convert_to_numpy(fast_grad)[0, 3:] == 0)


def test_global_token_count_twin_equals_portable_without_replicas():
    count = tf.constant(17.0)
    assert float(_tf_losses().global_token_count(count)) == 17.0
    assert float(portable.global_token_count(count)) == 17.0
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    result = strategy.run(_tf_losses().global_token_count, args=(count,))
    assert float(strategy.experimental_local_results(result)[0]) == 17.0


# ---------------------------------------------------------------------- Adam
def test_adam_twin_equals_portable_update():
    arguments = {"learning_rate": 0.01, "beta_2": 0.98, "epsilon": 1e-9}
    fused = train_embedding_model(kt.optimizers.Adam(**arguments))
    with kt.backend.fast_paths(False):
        plain = train_embedding_model(kt.optimizers.Adam(**arguments))
    keras_adam = train_embedding_model(keras.optimizers.Adam(**arguments))
    for a, b, c in zip(fused, plain, keras_adam, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
        # The portable branch is Keras' own update, to the bit.
        np.testing.assert_array_equal(b, c)


def test_adam_twins_equal_dense_adam_for_rows_looked_up_twice():
    # Row 1 is looked up twice in the batch: Adam's `v` gets the square of
    # the summed gradient, as Keras' Adam on the dense gradient computes.
    arguments = {"learning_rate": 0.01, "beta_2": 0.98, "epsilon": 1e-9}
    ids = [[1, 1, 2]]
    fused = train_embedding_model(kt.optimizers.Adam(**arguments), ids)
    with kt.backend.fast_paths(False):
        plain = train_embedding_model(kt.optimizers.Adam(**arguments), ids)
    dense = train_embedding_model(
        keras.optimizers.Adam(**arguments), ids, dense_gradients=True
    )
    for a, b, c in zip(fused, plain, dense, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(b, c, rtol=1e-5, atol=1e-6)
    # Rows 1 and 2 moved; the others did not.
    start = train_embedding_model(keras.optimizers.SGD(0.0), ids)[0]
    moved = np.any(fused[0] != start, axis=1)
    assert moved.tolist() == [i in (1, 2) for i in range(10)]
    # The case is one where summing before squaring matters: Keras' Adam
    # given the sparse gradient (the squares of the two lookups summed)
    # moves row 1 differently.
    sparse = train_embedding_model(keras.optimizers.Adam(**arguments), ids)
    assert np.abs(sparse[0][1] - dense[0][1]).max() > 1e-3


def test_portable_adam_sums_repeated_rows_of_a_sparse_gradient():
    rng = np.random.default_rng(30)
    start = rng.normal(size=(4, 3)).astype("float32")
    values = rng.normal(size=(3, 3)).astype("float32")
    sparse = tf.IndexedSlices(tf.constant(values), tf.constant([2, 0, 2]), (4, 3))
    dense = tf.convert_to_tensor(sparse)
    np.testing.assert_allclose(
        portable.dense_gradient(sparse, keras.Variable(start)), dense, atol=1e-7
    )
    results = []
    for gradient, update in (
        (sparse, portable.adam_update),
        (sparse, _tf_optimizers().adam_update),
        (dense, keras.optimizers.Adam.update_step),
    ):
        variable = keras.Variable(start)
        optimizer = kt.optimizers.Adam(0.1, beta_2=0.98, epsilon=1e-9)
        optimizer.build([variable])
        update(optimizer, gradient, variable, 0.1)
        results.append(
            [
                keras.ops.convert_to_numpy(v)
                for v in (variable, optimizer._momentums[0], optimizer._velocities[0])
            ]
        )
    for other in results[1:]:
        for a, b in zip(results[0], other, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
    # v of row 2 is (1 - beta_2) times the square of its summed gradient.
    np.testing.assert_allclose(
        results[0][2][2], 0.02 * (values[0] + values[2]) ** 2, rtol=1e-5
    )


def test_adam_twin_equals_portable_for_one_variable():
    rng = np.random.default_rng(29)
    start = rng.normal(size=(5, 3)).astype("float32")
    gradients = [rng.normal(size=(5, 3)).astype("float32") for _ in range(3)]
    results = []
    for twin in (True, False):
        variable = keras.Variable(start)
        optimizer = kt.optimizers.Adam(0.1, beta_2=0.98, epsilon=1e-9)
        optimizer.build([variable])
        for gradient in gradients:
            if twin:
                from keras_transformer.backend.tensorflow import optimizers

                optimizers.adam_update(optimizer, gradient, variable, 0.1)
            else:
                portable.adam_update(optimizer, gradient, variable, 0.1)
            optimizer.iterations.assign_add(1)
        results.append(
            [
                keras.ops.convert_to_numpy(v)
                for v in (variable, optimizer._momentums[0], optimizer._velocities[0])
            ]
        )
    for a, b in zip(*results, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)

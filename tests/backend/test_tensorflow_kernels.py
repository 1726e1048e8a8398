"""The TensorFlow fast paths give the results of the plain formulas.

Layer normalization, dropout, the masked softmax, the label-smoothed loss and
Adam each have a TensorFlow path with a hand-written gradient or a fused
kernel (`keras_transformer.backend.tensorflow`); these tests hold them to
Keras' own layers or to the textbook formulas differentiated by TensorFlow.
Tests marked `tensorflow_only` need TensorFlow's gradient tape or XLA; the
others check the layers' contracts on every backend.
(`test_portable_twins.py` holds each twin to the package's portable branch.)
"""

import keras
import numpy as np
import pytest

import keras_transformer as kt
from keras_transformer.backend import linear
from keras_transformer.layers import masking
from keras_transformer.losses import label_smoothed_nll
from tests.backend.helpers import train_embedding_model, values_and_grads
from tests.layer_testing import run_layer_test

tf = pytest.importorskip("tensorflow")


# ------------------------------------------------------------ LayerNorm
def test_layer_norm_contract(tmp_path):
    x = np.random.default_rng(0).normal(size=(2, 5, 8)).astype("float32")
    run_layer_test(
        kt.layers.LayerNormalization,
        {"epsilon": 1e-6},
        [x],
        (2, 5, 8),
        tmp_path,
        expected_num_weights=2,
        mixed_precision_output_dtype="float16",
    )


@pytest.mark.tensorflow_only
@pytest.mark.parametrize("shape", [(6, 16), (3, 4, 16)])
def test_layer_norm_equals_keras_values_and_gradients(shape):
    rng = np.random.default_rng(1)
    x = (rng.normal(size=shape) * 3 + 1).astype("float32")
    upstream = tf.constant(rng.normal(size=shape).astype("float32"))
    ours = kt.layers.LayerNormalization(epsilon=1e-6)
    reference = keras.layers.LayerNormalization(epsilon=1e-6)
    ours.build(shape)
    reference.build(shape)
    gamma = rng.normal(size=shape[-1:]).astype("float32") + 1
    beta = rng.normal(size=shape[-1:]).astype("float32")
    for layer in (ours, reference):
        layer.gamma.assign(gamma)
        layer.beta.assign(beta)
    results = []
    for layer in (ours, reference):
        with tf.GradientTape() as tape:
            inputs = tf.constant(x)
            tape.watch(inputs)
            outputs = layer(inputs)
        grads = tape.gradient(
            outputs, [inputs, layer.gamma.value, layer.beta.value], upstream
        )
        results.append([outputs, *grads])
    for ours_value, reference_value in zip(*results, strict=True):
        np.testing.assert_allclose(ours_value, reference_value, rtol=1e-4, atol=1e-5)


def test_layer_norm_other_axes_use_keras():
    x = np.random.default_rng(2).normal(size=(2, 3, 4)).astype("float32")
    ours = kt.layers.LayerNormalization(axis=1)
    reference = keras.layers.LayerNormalization(axis=1)
    np.testing.assert_allclose(ours(x), reference(x), rtol=1e-5, atol=1e-6)
    assert not ours._uses_fused_path(3)


def test_layer_norm_float16_inputs_are_normalized_in_float32():
    layer = kt.layers.LayerNormalization(dtype="mixed_float16")
    # Squares of ~1000 overflow float16 (max 65504), not float32.
    x = np.full((2, 8), 1000.0, "float16")
    x[:, 0] = 1001.0
    outputs = layer(x)
    assert outputs.dtype == "float16"
    assert np.all(np.isfinite(keras.ops.convert_to_numpy(outputs)))
    # One value differs from seven equal ones by 1: normalised to +-sqrt(7).
    assert float(outputs[0, 0]) == pytest.approx(7**0.5, rel=1e-2)


# --------------------------------------------------------------- Dropout
def test_dropout_contract(tmp_path):
    x = np.random.default_rng(0).normal(size=(2, 5, 8)).astype("float32")
    run_layer_test(kt.layers.Dropout, {"rate": 0.1}, [x], (2, 5, 8), tmp_path)


@pytest.mark.tensorflow_only
def test_dropout_rate_scale_and_gradient():
    rate, levels = 0.1, 2**16
    realised_rate = round(rate * levels) / levels
    layer = kt.layers.Dropout(rate, seed=3)
    x = tf.constant(np.random.default_rng(4).uniform(1, 2, (1001, 999)), "float32")
    outputs, (grad,) = values_and_grads(lambda x: layer(x, training=True), x)
    outputs, grad, x = (keras.ops.convert_to_numpy(t) for t in (outputs, grad, x))
    dropped = outputs == 0
    # 1,000,000 Bernoulli draws: the standard error is 3e-4.
    assert abs(dropped.mean() - realised_rate) < 2e-3
    scale = 1 / (1 - realised_rate)
    np.testing.assert_allclose(outputs[~dropped], x[~dropped] * scale, rtol=1e-6)
    # d(sum y)/dx is the mask times the scale.
    np.testing.assert_allclose(grad, np.where(dropped, 0.0, scale), rtol=1e-6)


def test_dropout_masks_are_seeded_and_change_between_calls():
    x = np.ones((4, 33), "float32")  # an odd number of elements
    first = kt.layers.Dropout(0.5, seed=7)
    second = kt.layers.Dropout(0.5, seed=7)
    a, b = first(x, training=True), second(x, training=True)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, first(x, training=True))
    assert 0.3 < float(np.mean(keras.ops.convert_to_numpy(a) == 0)) < 0.7


def test_dropout_inference_rate_zero_and_noise_shape():
    x = np.random.default_rng(5).normal(size=(3, 4, 6)).astype("float32")
    np.testing.assert_array_equal(kt.layers.Dropout(0.3)(x, training=False), x)
    np.testing.assert_array_equal(kt.layers.Dropout(0.0)(x, training=True), x)
    # noise_shape (Keras' implementation): one mask shared along axis 1.
    outputs = keras.ops.convert_to_numpy(
        kt.layers.Dropout(0.5, noise_shape=(3, 1, 6), seed=1)(x, training=True)
    )
    dropped = outputs == 0
    assert np.all(dropped == dropped[:, :1])


@pytest.mark.tensorflow_only
def test_dropout_runs_under_xla():
    layer = kt.layers.Dropout(0.25, seed=2)
    compiled = tf.function(lambda x: layer(x, training=True), jit_compile=True)
    outputs = keras.ops.convert_to_numpy(compiled(tf.ones((64, 64))))
    assert 0.15 < float(np.mean(outputs == 0)) < 0.35
    np.testing.assert_allclose(outputs[outputs != 0], 1 / 0.75, rtol=1e-3)


# ------------------------------------------------------- masked softmax
@pytest.mark.tensorflow_only
def test_masked_softmax_gradient_equals_the_plain_formula():
    rng = np.random.default_rng(6)
    logits = rng.normal(size=(2, 3, 4, 5)).astype("float32") * 3
    mask = rng.uniform(size=(2, 1, 4, 5)) > 0.3
    mask[0, 0, 1] = False  # a fully masked row
    upstream = tf.constant(rng.normal(size=logits.shape).astype("float32"))

    def plain(logits):
        weights = tf.nn.softmax(tf.where(mask, logits, masking.MASK_FILL_VALUE))
        return weights * tf.cast(mask, tf.float32)

    ours = values_and_grads(
        lambda z: masking.masked_softmax(z, mask), logits, upstream=upstream
    )
    reference = values_and_grads(plain, logits, upstream=upstream)
    np.testing.assert_allclose(ours[0], reference[0], atol=1e-6)
    np.testing.assert_allclose(ours[1][0], reference[1][0], atol=1e-5)
    assert np.all(keras.ops.convert_to_numpy(ours[1][0])[0, :, 1] == 0)


# ----------------------------------------------------------------- loss
def _plain_smoothed_nll(labels, logits, eps):
    log_probs = tf.nn.log_softmax(logits)
    nll = -tf.gather(log_probs, labels, axis=-1, batch_dims=2)
    uniform = -tf.reduce_mean(log_probs, axis=-1)
    return (1 - eps) * nll + eps * uniform, nll


@pytest.mark.tensorflow_only
@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_loss_values_and_gradients_equal_the_plain_formula(eps):
    rng = np.random.default_rng(7)
    logits = (rng.normal(size=(3, 4, 11)) * 5).astype("float32")
    logits[0, 0, 3] = 300.0  # a very confident wrong prediction stays exact
    labels = tf.constant(rng.integers(0, 11, (3, 4)), "int32")
    smoothed_up = tf.constant(rng.uniform(size=(3, 4)).astype("float32"))
    nll_up = tf.constant(rng.uniform(size=(3, 4)).astype("float32"))

    def weighted(function):
        def total(z):
            smoothed, nll = function(labels, z, eps)
            return tf.reduce_sum(smoothed * smoothed_up) + tf.reduce_sum(nll * nll_up)

        return total

    ours = values_and_grads(weighted(label_smoothed_nll), logits)
    reference = values_and_grads(weighted(_plain_smoothed_nll), logits)
    np.testing.assert_allclose(ours[0], reference[0], rtol=1e-5)
    np.testing.assert_allclose(ours[1][0], reference[1][0], atol=1e-5)
    # Only the smoothed loss differentiated (the nll output unused).
    only_smoothed = values_and_grads(
        lambda z: label_smoothed_nll(labels, z, eps)[0], logits
    )
    expected = values_and_grads(
        lambda z: _plain_smoothed_nll(labels, z, eps)[0], logits
    )
    np.testing.assert_allclose(only_smoothed[1][0], expected[1][0], atol=1e-5)


# ----------------------------------------------------------------- linear
@pytest.mark.parametrize("relu", [False, True])
def test_linear_equals_matmul_plus_bias(relu):
    rng = np.random.default_rng(8)
    x = rng.normal(size=(2, 3, 4)).astype("float32")
    kernel = rng.normal(size=(4, 5)).astype("float32")
    bias = rng.normal(size=(5,)).astype("float32")
    expected = x @ kernel + bias
    if relu:
        expected = np.maximum(expected, 0)
    np.testing.assert_allclose(
        linear(x, kernel, bias, relu=relu), expected, rtol=1e-5, atol=1e-6
    )
    np.testing.assert_allclose(linear(x, kernel), x @ kernel, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------ Adam
def test_adam_equals_keras_adam():
    arguments = {"learning_rate": 0.01, "beta_2": 0.98, "epsilon": 1e-9}
    ours = train_embedding_model(kt.optimizers.Adam(**arguments))
    reference = train_embedding_model(keras.optimizers.Adam(**arguments))
    for a, b in zip(ours, reference, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
    amsgrad = train_embedding_model(kt.optimizers.Adam(amsgrad=True, **arguments))
    amsgrad_reference = train_embedding_model(
        keras.optimizers.Adam(amsgrad=True, **arguments)
    )
    for a, b in zip(amsgrad, amsgrad_reference, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


def test_adam_serializes_with_the_schedule():
    optimizer = kt.schedules.paper_adam(64)
    assert isinstance(optimizer, kt.optimizers.Adam)
    restored = keras.optimizers.deserialize(keras.optimizers.serialize(optimizer))
    assert isinstance(restored, kt.optimizers.Adam)
    assert restored.get_config() == optimizer.get_config()


@pytest.mark.tensorflow_only
def test_adam_squares_the_summed_gradient_of_repeated_rows():
    # An embedding row looked up twice has one gradient, the sum of both
    # lookups'; Adam's second moment is the square of that sum.
    learning_rate, beta_1, beta_2, epsilon = 0.1, 0.9, 0.98, 1e-9
    table = keras.Variable(np.zeros((4, 2), "float32"))
    ids = tf.constant([1, 1, 2])
    optimizer = kt.optimizers.Adam(learning_rate, beta_2=beta_2, epsilon=epsilon)
    gradient = np.zeros((4, 2))
    gradient[1], gradient[2] = [2.0, 4.0], [1.0, 2.0]
    weights, m, v = np.zeros((4, 2)), np.zeros((4, 2)), np.zeros((4, 2))
    for step in range(1, 4):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.gather(table.value, ids) * [[1.0, 2.0]])
        grad = tape.gradient(loss, table.value)
        assert isinstance(grad, tf.IndexedSlices)
        optimizer.apply([grad], [table])
        m = beta_1 * m + (1 - beta_1) * gradient
        v = beta_2 * v + (1 - beta_2) * gradient**2
        alpha = learning_rate * np.sqrt(1 - beta_2**step) / (1 - beta_1**step)
        weights -= alpha * m / (np.sqrt(v) + epsilon)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(table), weights, rtol=1e-5)


@pytest.mark.tensorflow_only
@pytest.mark.parametrize(("d_in", "d_out"), [(4, 12), (12, 4), (6, 6)])
def test_linear_gradients_equal_the_plain_products(d_in, d_out):
    rng = np.random.default_rng(9)
    x = rng.normal(size=(2, 3, d_in)).astype("float32")
    kernel = rng.normal(size=(d_in, d_out)).astype("float32")
    bias = rng.normal(size=(d_out,)).astype("float32")
    upstream = tf.constant(rng.normal(size=(2, 3, d_out)).astype("float32"))
    ours = values_and_grads(
        lambda x, k, b: linear(x, k, b, relu=True), x, kernel, bias, upstream=upstream
    )
    reference = values_and_grads(
        lambda x, k, b: tf.nn.relu(tf.einsum("bti,io->bto", x, k) + b),
        x,
        kernel,
        bias,
        upstream=upstream,
    )
    np.testing.assert_allclose(ours[0], reference[0], rtol=1e-5, atol=1e-5)
    for a, b in zip(ours[1], reference[1], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.tensorflow_only
def test_loss_gradient_is_the_same_under_xla():
    rng = np.random.default_rng(10)
    logits = tf.constant(rng.normal(size=(2, 3, 7)).astype("float32"))
    labels = tf.constant(rng.integers(0, 7, (2, 3)), "int32")

    def gradient(logits):
        with tf.GradientTape() as tape:
            tape.watch(logits)
            loss = tf.reduce_sum(label_smoothed_nll(labels, logits, 0.1)[0])
        return tape.gradient(loss, logits)

    graph = tf.function(gradient)(logits)
    xla = tf.function(gradient, jit_compile=True)(logits)
    np.testing.assert_allclose(graph, xla, atol=1e-6)
    np.testing.assert_allclose(graph, gradient(logits), atol=1e-6)


@pytest.mark.tensorflow_only
def test_loss_refuses_labels_outside_the_vocabulary():
    logits = tf.zeros((1, 2, 5))
    with pytest.raises(tf.errors.InvalidArgumentError, match="vocabulary size"):
        label_smoothed_nll(tf.constant([[1, 9]]), logits, 0.1)
    with pytest.raises(tf.errors.InvalidArgumentError, match="negative"):
        label_smoothed_nll(tf.constant([[1, -1]]), logits, 0.1)


@pytest.mark.tensorflow_only
def test_forward_only_traces_the_twins_without_gradient_carriers():
    """An export traces under `backend.forward_only()`: the same values,
    without the `IdentityN` that carries each `tf.custom_gradient` (a loaded
    SavedModel warned about every function holding one), and the gradients
    are back once the block is closed."""
    from keras_transformer import backend

    rng = np.random.default_rng(3)
    x = tf.constant(rng.normal(size=(2, 3, 4)).astype("float32"))
    kernel = tf.constant(rng.normal(size=(4, 4)).astype("float32"))
    mask = tf.constant(rng.uniform(size=(2, 3, 3)) > 0.3)

    def forward(x):
        hidden = backend.linear(x, kernel, kernel[0], relu=True)
        hidden = backend.layer_norm(hidden, kernel[1], kernel[2], -1, 1e-6)
        scores = tf.matmul(hidden, hidden, transpose_b=True)
        return backend.masked_softmax(scores, mask)

    def carriers(concrete):
        return [op for op in concrete.graph.get_operations() if op.type == "IdentityN"]

    with backend.forward_only():
        assert backend.forward_only_enabled()
        plain = tf.function(forward).get_concrete_function(x)
    assert not backend.forward_only_enabled()
    carrying = tf.function(forward).get_concrete_function(x)
    assert carriers(carrying) and not carriers(plain)
    np.testing.assert_array_equal(plain(x).numpy(), carrying(x).numpy())
    with tf.GradientTape() as tape:
        tape.watch(x)
        loss = tf.reduce_sum(carrying(x) * x[..., :3])
    assert tape.gradient(loss, x) is not None

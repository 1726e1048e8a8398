"""One switch turns every fast path off: `KERAS_TRANSFORMER_FAST_PATHS=0` or
`kt.backend.fast_paths(False)` (also a context manager)."""

import contextlib
from unittest import mock

import keras
import numpy as np
import pytest

import keras_transformer as kt
from keras_transformer import backend
from keras_transformer.backend import portable

ON_TENSORFLOW = keras.backend.backend() == "tensorflow"


@pytest.fixture(autouse=True)
def _default_switch(monkeypatch):
    """Each test starts with the switch unset and the variable absent."""
    monkeypatch.delenv(backend.ENVIRONMENT_VARIABLE, raising=False)
    with backend.fast_paths(None):
        yield


def _calls():
    """One call of every dispatch function that has a fast path, by module
    and name of the implementation it should reach."""
    rng = np.random.default_rng(0)
    # Tensors, as layers pass them (Keras' dropout on torch wants one).
    x = keras.ops.convert_to_tensor(rng.normal(size=(2, 3, 4)).astype("float32"))
    kernel = rng.normal(size=(4, 4)).astype("float32")
    mask = rng.uniform(size=(2, 3, 4)) > 0.3
    labels = rng.integers(0, 4, (2, 3))
    optimizer = kt.optimizers.Adam(0.1)
    variable = keras.Variable(np.zeros((4, 4), "float32"))
    optimizer.build([variable])
    return {
        "linear": lambda: backend.linear(x, kernel, kernel[0], relu=True),
        "matmul_transposed": lambda: backend.matmul_transposed(x, kernel),
        "residual_add": lambda: backend.residual_add(x, x),
        "layer_norm": lambda: backend.layer_norm(x, kernel[0], kernel[1], -1, 1e-6),
        "masked_softmax": lambda: backend.masked_softmax(x, mask),
        "dropout": lambda: backend.dropout(x, 0.5, seed=keras.random.SeedGenerator(1)),
        "label_smoothed_nll": lambda: backend.label_smoothed_nll(labels, x, 0.1),
        "adam_update": lambda: backend.adam_update(optimizer, kernel, variable, 0.1),
    }


def _tensorflow_module(name):
    from keras_transformer.backend.tensorflow import losses, nn, optimizers

    return {"label_smoothed_nll": losses, "adam_update": optimizers}.get(name, nn)


@contextlib.contextmanager
def _spies(name):
    """Counts the calls of the portable and (on TensorFlow) the twin."""
    with contextlib.ExitStack() as stack:
        spies = {
            "portable": stack.enter_context(
                mock.patch.object(
                    portable, name, autospec=True, side_effect=getattr(portable, name)
                )
            )
        }
        if ON_TENSORFLOW:
            module = _tensorflow_module(name)
            spies["tensorflow"] = stack.enter_context(
                mock.patch.object(
                    module, name, autospec=True, side_effect=getattr(module, name)
                )
            )
        yield spies


def _branches_taken():
    taken = {}
    for name, call in _calls().items():
        with _spies(name) as spies:
            call()
        taken[name] = sorted(branch for branch, spy in spies.items() if spy.called)
    return taken


def test_every_dispatch_is_covered():
    # Each dispatch function with a fast path appears in _calls().
    assert set(_calls()) == {
        "linear",
        "matmul_transposed",
        "residual_add",
        "layer_norm",
        "masked_softmax",
        "dropout",
        "label_smoothed_nll",
        "adam_update",
    }


@pytest.mark.tensorflow_only
def test_fast_paths_are_on_by_default_on_tensorflow():
    assert backend.fast_paths_enabled()
    assert backend.uses_tensorflow_fast_paths()
    taken = _branches_taken()
    assert all(branches == ["tensorflow"] for branches in taken.values()), taken


def test_the_context_manager_selects_every_portable_branch():
    with backend.fast_paths(False) as switch:
        assert isinstance(switch, backend.fast_paths)
        assert not backend.fast_paths_enabled()
        assert not backend.uses_tensorflow_fast_paths()
        taken = _branches_taken()
    assert all(branches == ["portable"] for branches in taken.values()), taken
    # The previous setting is back.
    assert backend.fast_paths_enabled()


@pytest.mark.parametrize("value", ["0", "false", "OFF", " no "])
def test_the_environment_variable_selects_every_portable_branch(monkeypatch, value):
    monkeypatch.setenv(backend.ENVIRONMENT_VARIABLE, value)
    # Read at call time: no reload, no re-import.
    assert not backend.fast_paths_enabled()
    taken = _branches_taken()
    assert all(branches == ["portable"] for branches in taken.values()), taken
    monkeypatch.setenv(backend.ENVIRONMENT_VARIABLE, "1")
    assert backend.fast_paths_enabled()


def test_the_function_form_and_its_precedence(monkeypatch):
    backend.fast_paths(False)
    assert not backend.fast_paths_enabled()
    backend.fast_paths(True)
    assert backend.fast_paths_enabled()
    monkeypatch.setenv(backend.ENVIRONMENT_VARIABLE, "0")
    # An explicit setting wins over the environment variable ...
    assert backend.fast_paths_enabled()
    # ... until it is handed back to it.
    backend.fast_paths(None)
    assert not backend.fast_paths_enabled()
    with backend.fast_paths(True):
        assert backend.fast_paths_enabled()
    assert not backend.fast_paths_enabled()


def test_the_switch_refuses_other_values():
    with pytest.raises(ValueError, match="enabled=0"):
        backend.fast_paths(0)
    assert backend.fast_paths_enabled()


@pytest.mark.tensorflow_only
def test_the_switch_selects_keras_dropout_and_layer_norm():
    x = np.random.default_rng(1).normal(size=(8, 33)).astype("float32")
    with backend.fast_paths(False):
        ours = kt.layers.Dropout(0.5, seed=7)(x, training=True)
        norm = kt.layers.LayerNormalization()
        norm.build(x.shape)
        assert not norm._uses_fused_path(2)
    reference = keras.layers.Dropout(0.5, seed=7)(x, training=True)
    # Keras' own dropout: the same seed gives the same mask, to the bit.
    np.testing.assert_array_equal(ours, reference)
    fast = kt.layers.Dropout(0.5, seed=7)(x, training=True)
    assert not np.array_equal(fast, reference)
    assert norm._uses_fused_path(2)


def test_global_token_count_follows_the_keras_backend_only():
    # Not a fast path: the loss's definition under tf.distribute.
    with backend.fast_paths(False):
        assert float(backend.global_token_count(keras.ops.convert_to_tensor(5.0))) == 5


def test_layers_give_the_same_results_with_the_switch_off():
    keras.utils.set_random_seed(3)
    block = kt.layers.EncoderBlock(num_heads=2, d_ff=16, dropout=0.0)
    x = np.random.default_rng(2).normal(size=(2, 5, 8)).astype("float32")
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)
    fast = keras.ops.convert_to_numpy(block(x, padding_mask=mask))
    with backend.fast_paths(False):
        plain = keras.ops.convert_to_numpy(block(x, padding_mask=mask))
    np.testing.assert_allclose(fast, plain, rtol=1e-5, atol=1e-5)

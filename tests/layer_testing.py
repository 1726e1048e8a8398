"""`run_layer_test`: the checks every layer of the package must pass."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import keras
import numpy as np

from keras_transformer.layers import AttentionResult


def _output(result: Any) -> Any:
    """A layer's output: the `output` of an attention layer's `AttentionResult`."""
    return result.output if isinstance(result, AttentionResult) else result


def _as_inputs(arrays: Sequence[np.ndarray]) -> list[keras.KerasTensor]:
    return [
        keras.Input(shape=array.shape[1:], dtype=str(array.dtype), batch_size=None)
        for array in arrays
    ]


def run_layer_test(
    layer_cls: type[keras.layers.Layer],
    init_kwargs: dict[str, Any],
    inputs: Sequence[np.ndarray],
    expected_output_shape: tuple[int, ...],
    tmp_path: Path,
    call_kwargs: dict[str, Any] | None = None,
    expected_num_weights: int | None = None,
    mixed_precision_output_dtype: str = "float16",
) -> keras.layers.Layer:
    """Config round trip, symbolic and eager calls, a fit step, save/load and
    a mixed-precision call, for one layer class and its constructor args."""
    call_kwargs = call_kwargs or {}
    # Config round trip: get_config -> from_config -> the same JSON.
    layer = layer_cls(**init_kwargs)
    config = layer.get_config()
    clone = layer_cls.from_config(config)
    assert json.dumps(clone.get_config(), sort_keys=True) == json.dumps(
        config, sort_keys=True
    )
    for key, value in init_kwargs.items():
        if isinstance(value, (int, float, str, bool)) or value is None:
            assert config[key] == value, key

    # Symbolic call: shape and dtype.
    symbolic_inputs = _as_inputs(inputs)
    symbolic_output = _output(layer(*symbolic_inputs, **call_kwargs))
    assert tuple(symbolic_output.shape[1:]) == tuple(expected_output_shape[1:])
    assert symbolic_output.dtype == "float32"
    if expected_num_weights is not None:
        assert len(layer.weights) == expected_num_weights

    # Eager call: shape, dtype, finite values.
    eager_output = _output(layer(*inputs, **call_kwargs))
    assert tuple(eager_output.shape) == tuple(expected_output_shape)
    assert np.all(np.isfinite(keras.ops.convert_to_numpy(eager_output)))

    # One fit step changes the weights.
    model = keras.Model(symbolic_inputs, symbolic_output)
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    before = [keras.ops.convert_to_numpy(w).copy() for w in model.trainable_weights]
    target = np.ones(expected_output_shape, "float32")
    model.fit(list(inputs), target, batch_size=len(inputs[0]), epochs=1, verbose=0)
    after = [keras.ops.convert_to_numpy(w) for w in model.trainable_weights]
    if before:
        assert any(not np.allclose(b, a) for b, a in zip(before, after, strict=True))

    # .keras save and load give identical outputs.
    path = tmp_path / f"{layer_cls.__name__}.keras"
    model.save(path)
    restored = keras.models.load_model(path)
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(restored.predict(list(inputs), verbose=0)),
        keras.ops.convert_to_numpy(model.predict(list(inputs), verbose=0)),
        rtol=1e-6,
        atol=1e-6,
    )

    # Mixed precision: computes in float16 and stays finite.
    mixed = layer_cls(**init_kwargs, dtype="mixed_float16")
    mixed_output = _output(mixed(*inputs, **call_kwargs))
    assert (
        keras.backend.standardize_dtype(mixed_output.dtype)
        == mixed_precision_output_dtype
    )
    assert np.all(np.isfinite(keras.ops.convert_to_numpy(mixed_output)))
    return layer

"""Eq. 7, the paper's Adam, label-smoothed loss and masked metrics."""

import json
import os
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
from keras import ops

from keras_transformer.losses import MaskedSparseCrossEntropy
from keras_transformer.metrics import MaskedAccuracy, Perplexity
from keras_transformer.schedules import NoamSchedule, OptimizerConfig, paper_adam


def test_equation_7_matches_numpy():
    schedule = NoamSchedule(d_model=512, warmup_steps=4000)
    steps = np.array([0, 1, 10, 3998, 3999, 4000, 10_000, 100_000])
    n = steps + 1.0
    expected = 512**-0.5 * np.minimum(n**-0.5, n * 4000**-1.5)
    np.testing.assert_allclose(
        ops.convert_to_numpy(schedule(steps)), expected, rtol=1e-6
    )


def test_schedule_step_zero_and_peak():
    schedule = NoamSchedule(d_model=512, warmup_steps=4000)
    assert float(schedule(0)) > 0
    rates = ops.convert_to_numpy(schedule(np.arange(8000)))
    assert int(np.argmax(rates)) == 3999
    assert rates.max() == pytest.approx(512**-0.5 * 4000**-0.5, rel=1e-6)


def test_schedule_serialization():
    schedule = NoamSchedule(d_model=256, warmup_steps=100, scale=2.0)
    restored = keras.optimizers.schedules.deserialize(
        json.loads(json.dumps(keras.optimizers.schedules.serialize(schedule)))
    )
    assert float(restored(50)) == pytest.approx(float(schedule(50)))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"d_model": 0}, "d_model=0"),
        ({"d_model": 8, "warmup_steps": -4}, "warmup_steps=-4"),
    ],
)
def test_schedule_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        NoamSchedule(**kwargs)


def test_paper_adam_constants():
    optimizer = paper_adam(512)
    assert (optimizer.beta_1, optimizer.beta_2, optimizer.epsilon) == (0.9, 0.98, 1e-9)
    schedule_config = optimizer.get_config()["learning_rate"]
    assert schedule_config["class_name"] == "NoamSchedule"
    assert schedule_config["config"] == {
        "d_model": 512,
        "warmup_steps": 4000,
        "scale": 1.0,
    }
    clipped = paper_adam(512, OptimizerConfig(clipnorm=1.0, warmup_steps=8000))
    assert clipped.global_clipnorm == 1.0


def numpy_smoothed_loss(labels, logits, eps, pad=0):
    logits = logits - logits.max(-1, keepdims=True)
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    vocab = logits.shape[-1]
    target = np.full(logits.shape, eps / vocab)
    np.put_along_axis(target, labels[..., None], 1 - eps + eps / vocab, -1)
    token_loss = -(target * log_probs).sum(-1)
    real = labels != pad
    return token_loss[real].mean()


def test_label_smoothed_loss_matches_numpy_and_ignores_padding():
    rng = np.random.default_rng(0)
    labels = np.array([[4, 2, 7, 0, 0], [1, 3, 0, 0, 0]])
    logits = rng.normal(size=(2, 5, 9)).astype("float32")
    for eps in (0.0, 0.1):
        loss = float(MaskedSparseCrossEntropy(label_smoothing=eps)(labels, logits))
        assert loss == pytest.approx(numpy_smoothed_loss(labels, logits, eps), rel=1e-5)
    changed = logits.copy()
    changed[labels == 0] = 100.0
    assert float(MaskedSparseCrossEntropy()(labels, changed)) == pytest.approx(
        float(MaskedSparseCrossEntropy()(labels, logits)), rel=1e-6
    )


def test_loss_is_float32_for_float16_logits():
    logits = np.random.rand(2, 3, 5).astype("float16")
    value = MaskedSparseCrossEntropy()(np.array([[1, 2, 0], [3, 0, 0]]), logits)
    assert keras.backend.standardize_dtype(value.dtype) == "float32"


def test_loss_bad_arguments():
    with pytest.raises(ValueError, match="label_smoothing=1.0"):
        MaskedSparseCrossEntropy(label_smoothing=1.0)
    with pytest.raises(ValueError, match="y_pred.shape"):
        MaskedSparseCrossEntropy()(np.zeros((2, 3)), np.zeros((2, 3)))


def test_metrics_ignore_padding():
    labels = np.array([[1, 2, 0, 0]])
    logits = np.eye(4, dtype="float32")[[[1, 3, 1, 1]]] * 5
    accuracy = MaskedAccuracy()
    accuracy.update_state(labels, logits)
    assert float(accuracy.result()) == pytest.approx(0.5)
    perplexity = Perplexity()
    perplexity.update_state(labels, logits)
    log_probs = logits[0] - np.log(np.exp(logits[0]).sum(-1, keepdims=True))
    expected = np.exp(-(log_probs[0, 1] + log_probs[1, 2]) / 2)
    assert float(perplexity.result()) == pytest.approx(expected, rel=1e-5)


DISTRIBUTED_LOSS_SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    import numpy as np, tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    from keras_transformer.losses import MaskedSparseCrossEntropy
    rng = np.random.default_rng(0)
    # Replica 0 sees 7 real tokens, replica 1 sees 2: unequal padding.
    labels = np.array([[1, 2, 3, 4], [5, 6, 7, 0], [1, 0, 0, 0], [2, 0, 0, 0]], "int32")
    logits = rng.normal(size=(4, 4, 9)).astype("float32")
    loss = MaskedSparseCrossEntropy(label_smoothing=0.1)
    global_mean = float(loss(labels, logits))
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    dataset = tf.data.Dataset.from_tensor_slices((labels, logits)).batch(4)
    batch = next(iter(strategy.experimental_distribute_dataset(dataset)))
    per_replica = strategy.run(lambda y, p: loss(y, p), args=batch)
    summed = float(strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None))
    locals_ = [float(v) for v in strategy.experimental_local_results(per_replica)]
    print(json.dumps({"global": global_mean, "summed": summed, "locals": locals_}))
    """
)


@pytest.mark.tensorflow_only
@pytest.mark.parametrize("fast_paths", ["1", "0"])
def test_loss_averages_over_the_global_batch_across_replicas(fast_paths):
    """Two logical CPU devices with unequal padding: the replicas' losses add
    up to the global mean over real tokens (what summed gradients need),
    with the fast paths on and off (the global count is not a fast path)."""
    result = subprocess.run(
        [sys.executable, "-c", DISTRIBUTED_LOSS_SCRIPT],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
        env={
            **os.environ,
            "KERAS_BACKEND": "tensorflow",
            "KERAS_TRANSFORMER_FAST_PATHS": fast_paths,
        },
    )
    values = json.loads(result.stdout.strip().splitlines()[-1])
    assert len(values["locals"]) == 2
    assert values["summed"] == pytest.approx(values["global"], rel=1e-5)
    # The naive mean of the per-replica means would differ.
    assert values["locals"][0] != pytest.approx(values["locals"][1], rel=1e-2)

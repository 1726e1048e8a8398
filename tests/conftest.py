"""Shared test set-up: quiet TensorFlow, seeded runs, restored global policy.

`KERAS_BACKEND` defaults to TensorFlow; `make test-jax` runs the core's
tests (layers, models, losses, schedules, metrics, backend) on JAX. Tests
that exercise TensorFlow itself (its kernels under `tf.GradientTape`,
`tf.distribute`, XLA through `tf.function`) carry the `tensorflow_only`
marker and are skipped on other backends.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import pytest  # noqa: E402


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "tensorflow_only: needs the TensorFlow backend (tf.GradientTape on "
        "TensorFlow kernels, tf.distribute, XLA through tf.function); skipped "
        "on other backends",
    )


def pytest_collection_modifyitems(
    config: pytest.Config, items: list[pytest.Item]
) -> None:
    backend = keras.backend.backend()
    if backend == "tensorflow":
        return
    skip = pytest.mark.skip(
        reason=f"needs the TensorFlow backend (KERAS_BACKEND={backend})"
    )
    for item in items:
        if "tensorflow_only" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _seed_and_restore_policy():
    """Every test starts from the same seed and the float32 policy."""
    keras.utils.set_random_seed(1234)
    policy = keras.config.dtype_policy()
    yield
    keras.config.set_dtype_policy(policy)

"""Shared test set-up: quiet TensorFlow, seeded runs, restored global policy.

`KERAS_BACKEND` defaults to TensorFlow; `make test-jax` runs the core's
tests (layers, models, losses, schedules, metrics, backend) on JAX. Tests
that exercise TensorFlow itself (its kernels under `tf.GradientTape`,
`tf.distribute`, XLA through `tf.function`) carry the `tensorflow_only`
marker and are skipped on other backends.
"""

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

# TensorFlow's start-up lines ("oneDNN custom operations are on", ...) are
# not reached by TF_CPP_MIN_LOG_LEVEL; pytest-xdist's workers import it
# before output is captured, so `make test` began with them. The command
# line's quiet import drops them here too.
from keras_transformer.cli._startup import drop_tensorflow_startup_lines  # noqa: E402

drop_tensorflow_startup_lines()

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


@pytest.fixture
def autograph_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The functions AutoGraph converts while the test runs (it should
    convert none of the package's searches: they are traced as written)."""
    import tensorflow as tf
    from tensorflow.python.autograph.impl import api

    calls: list[str] = []
    original = api.converted_call

    def counting(function, *args, **kwargs):  # noqa: ANN001, ANN202
        calls.append(getattr(function, "__qualname__", repr(function)))
        return original(function, *args, **kwargs)

    monkeypatch.setattr(api, "converted_call", counting)
    # The counter sees AutoGraph when it runs.
    tf.function(lambda x: x + 1)(tf.constant(1))
    assert calls, "AutoGraph's entry point moved: update this fixture"
    calls.clear()
    return calls


# ------------------------------------------------ trained runs the session shares
# One tiny finished run of each kind, trained once per session and read by
# every pytest-xdist worker (`tests.shared_builds.built_once`), for every test
# file that uses it. Tests only READ these folders; a test that writes into a
# run (damage, resume, average into the run) works on its own copy:
# ``shutil.copytree(shared_run, tmp_path / "run")``.
# Their settings: tests/training/helpers.py `SHARED_RUN_OVERRIDES`.


@pytest.fixture(scope="session", autouse=True)
def _shared_builds_folder(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Builds of `built_once` go to this session's folder (all workers')."""
    from tests.shared_builds import use_session_folder

    use_session_folder(tmp_path_factory)


@pytest.fixture(scope="session")
def shared_reviews() -> Path:
    """Synthetic reviews (``data.data_dir``) of the shared classification run."""
    from tests.shared_builds import built_once
    from tests.training.helpers import write_reviews

    return built_once("shared_reviews", write_reviews)


def _train_into(config_of: Callable[[], Any]) -> Callable[[Path], None]:
    """A `built_once` build: train `config_of()` into ``folder / "run"``."""

    def build(folder: Path) -> None:
        from keras_transformer.training import train

        train(config_of(), folder / "run", printer=None)

    return build


@pytest.fixture(scope="session")
def shared_translation_run() -> Path:
    """A finished tiny translation run (`SMALL_CONFIG`), checkpoints 3, 6, 9."""
    from tests.shared_builds import built_once
    from tests.training.helpers import SHARED_RUN_OVERRIDES, small_config

    build = _train_into(lambda: small_config(*SHARED_RUN_OVERRIDES))
    return built_once("shared_translation", build) / "run"


@pytest.fixture(scope="session")
def shared_classification_run(shared_reviews: Path) -> Path:
    """The classification twin of `shared_translation_run` (on `shared_reviews`)."""
    from tests.shared_builds import built_once
    from tests.training.helpers import (
        SHARED_RUN_OVERRIDES,
        small_classification_config,
    )

    build = _train_into(
        lambda: small_classification_config(shared_reviews, *SHARED_RUN_OVERRIDES)
    )
    return built_once("shared_classification", build) / "run"


@pytest.fixture(scope="session")
def shared_image_run() -> Path:
    """The image twin of `shared_translation_run`: checkpoints 3, 6 and 9."""
    from tests.shared_builds import built_once
    from tests.training.helpers import SHARED_RUN_OVERRIDES, small_image_config

    build = _train_into(lambda: small_image_config(*SHARED_RUN_OVERRIDES))
    return built_once("shared_image", build) / "run"


@pytest.fixture(scope="session")
def exported() -> Path:
    """The SavedModel export (beam 4) of `tests.export_helpers.tiny_translator`.

    Tests only read it; one that overwrites or damages an export works on a
    copy (``shutil.copytree(exported, tmp_path / "1")``)."""
    from keras_transformer import export
    from tests.export_helpers import tiny_translator
    from tests.shared_builds import built_once

    def build(folder: Path) -> None:
        model, tokenizer = tiny_translator()
        assert export.export_translator(model, tokenizer, folder / "1") == folder / "1"

    return built_once("exported", build) / "1"

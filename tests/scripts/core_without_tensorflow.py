"""Checks that the core of keras-transformer runs without TensorFlow.

Run with a Python that has only `keras`, `numpy` and a Keras backend other
than TensorFlow installed, from the repository root, for example

    python3 -m venv /tmp/venv-core
    /tmp/venv-core/bin/pip install keras numpy "jax[cpu]"
    KERAS_BACKEND=jax /tmp/venv-core/bin/python tests/scripts/core_without_tensorflow.py

With `--installed` it imports the package installed in that Python
(`tests/test_packaging.py`, which `make test-core` runs, installs the built
wheel with only its core requirements and JAX, which proves that setup.py's
core requirements are enough) instead of the checkout.

It imports `keras_transformer.layers` and `.models` (and the losses,
metrics, schedules and optimizers), builds the `tiny` preset, compiles it
with `kt.losses.MaskedSparseCrossEntropy` (label smoothing, §5.4) and Adam
under the schedule of Eq. 7 (`kt.schedules.NoamSchedule`, §5.3), runs one
fit step on random token ids and prints the loss. TensorFlow,
tensorflow-text, matplotlib and sacrebleu are blocked by an import hook, so
the check also holds where they happen to be installed
(`tests/backend/test_core_imports.py` runs it that way).
"""

from __future__ import annotations

import importlib.abc
import os
import sys
from pathlib import Path

BLOCKED = ("tensorflow", "tensorflow_text", "matplotlib", "sacrebleu")


class _Blocker(importlib.abc.MetaPathFinder):
    """Refuses to import the submodules of the packages the core must not need
    (the packages themselves are `None` in `sys.modules`, so that importing
    them fails and `importlib.util.find_spec` reports them as absent, which
    is how PyTorch probes for TensorFlow)."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(
                f"{name} is blocked: the core must run without it", name=name
            )
        return None


def _block() -> None:
    for name in BLOCKED:
        sys.modules[name] = None  # type: ignore[assignment]
    sys.meta_path.insert(0, _Blocker())


def _check_not_imported() -> None:
    for name in BLOCKED:
        assert sys.modules.get(name) is None, f"{name} was imported"
        assert not [m for m in sys.modules if m.startswith(name + ".")], name


def main() -> None:
    _block()
    repository = Path(__file__).resolve().parents[2]
    installed = "--installed" in sys.argv[1:]
    if not installed:
        sys.path.insert(0, str(repository))
    os.environ.setdefault("KERAS_BACKEND", "jax")

    import keras
    import numpy as np

    import keras_transformer as kt
    import keras_transformer.layers
    import keras_transformer.models  # noqa: F401

    _check_not_imported()
    source_tree = (
        Path(kt.__file__).resolve().is_relative_to(repository / "keras_transformer")
    )
    if installed and source_tree:
        raise SystemExit(f"--installed, but {kt.__file__} is the checkout's")
    config = kt.models.presets["tiny"]
    keras.utils.set_random_seed(0)
    model = kt.models.build_transformer(config)
    optimizer = kt.optimizers.Adam(
        kt.schedules.NoamSchedule(config.d_model, warmup_steps=4000),
        beta_1=0.9,
        beta_2=0.98,
        epsilon=1e-9,
    )
    model.compile(
        optimizer=optimizer,
        loss=kt.losses.MaskedSparseCrossEntropy(label_smoothing=0.1),
        metrics=[kt.metrics.MaskedAccuracy(), kt.metrics.Perplexity()],
    )
    rng = np.random.default_rng(0)
    batch, length = 4, 12
    source = rng.integers(4, config.vocabulary_size, (batch, length)).astype("int32")
    target = rng.integers(4, config.vocabulary_size, (batch, length + 1))
    target = target.astype("int32")
    source[:, -3:] = 0  # padding
    target[:, -2:] = 0
    inputs = {"source_ids": source, "target_ids": target[:, :-1]}
    history = model.fit(inputs, target[:, 1:], batch_size=batch, epochs=1, verbose=0)
    loss = history.history["loss"][0]
    assert np.isfinite(loss), loss
    _check_not_imported()
    print(
        f"keras {keras.__version__} on {keras.backend.backend()}: "
        f"tiny preset, {model.count_params():,} parameters, one fit step, "
        f"loss {loss:.4f} ({'installed package' if installed else 'checkout'})"
    )


if __name__ == "__main__":
    main()

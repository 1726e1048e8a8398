"""keras-transformer: the Transformer of "Attention Is All You Need" for Keras 3.

>>> import keras_transformer as kt
>>> model = kt.models.build_transformer(kt.models.presets["tiny"])

The core (`layers`, `models`, `losses`, `metrics`, `schedules`,
`optimizers`) needs only `keras` and `numpy` and runs on every Keras
backend. The rest (`data`, `decoding`, `training`, `translation`, `export`,
`visualize`) needs TensorFlow and friends (the `train` extra) and is
imported on first use, so `import keras_transformer` stays light.

Every submodule, the core included, is imported on first use
(``kt.models`` or ``from keras_transformer import models``): importing
Keras starts its backend (TensorFlow: seconds, and log lines), which the
command line must not pay before it has parsed its arguments
(``keras-transformer --help``). The package's Keras layers are registered
for ``keras.saving.load_model`` once ``kt.models`` (or ``kt.layers``, or a
module built on them) has been imported.
"""

import importlib
from typing import Any

__version__ = "0.1.0"

# Imported on first use. The core needs only keras and numpy; the rest
# needs TensorFlow, tensorflow-text, sacrebleu, TensorBoard or matplotlib.
_LAZY_MODULES = (
    "layers",
    "losses",
    "metrics",
    "models",
    "optimizers",
    "schedules",
    "backend",
    "data",
    "decoding",
    "export",
    "image_sampling",
    "runs",
    "training",
    "translation",
    "visualize",
)


def __getattr__(name: str) -> Any:
    if name in _LAZY_MODULES:
        module = importlib.import_module(f"keras_transformer.{name}")
        globals()[name] = module
        return module
    if name == "evaluate":
        from keras_transformer.translation import evaluate

        return evaluate
    raise AttributeError(f"module 'keras_transformer' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


__all__ = [
    "backend",
    "data",
    "decoding",
    "evaluate",
    "export",
    "image_sampling",
    "layers",
    "losses",
    "metrics",
    "models",
    "optimizers",
    "runs",
    "schedules",
    "training",
    "translation",
    "visualize",
    "__version__",
]

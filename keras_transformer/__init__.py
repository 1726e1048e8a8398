"""keras-transformer: the Transformer of "Attention Is All You Need" for Keras 3.

>>> import keras_transformer as kt
>>> model = kt.models.build_transformer(kt.models.presets["tiny"])
"""

from keras_transformer import (
    data,
    decoding,
    layers,
    losses,
    metrics,
    models,
    schedules,
    visualize,
)

__version__ = "0.1.0"

__all__ = [
    "data",
    "decoding",
    "layers",
    "losses",
    "metrics",
    "models",
    "schedules",
    "visualize",
    "__version__",
]

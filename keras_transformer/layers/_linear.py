"""`linear`, the Transformer's linear maps (Eqs. 2, 4): a re-export.

The operation lives in `keras_transformer.backend.linear`, which dispatches
between the portable `keras.ops` product and its TensorFlow twin.
"""

from keras_transformer.backend import linear

__all__ = ["linear"]

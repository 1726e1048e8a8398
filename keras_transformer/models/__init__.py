"""The paper's model: configuration, presets (Table 3), the builder and its stack.

`TransformerLayers` is the former name of `TransformerStack` (still importable).
"""

from keras_transformer.models.config import TransformerConfig
from keras_transformer.models.presets import (
    PAPER_PARAMETER_COUNTS_M,
    get_preset,
    presets,
)
from keras_transformer.models.transformer import (
    IncrementalDecoder,
    TransformerLayers,
    TransformerStack,
    build_transformer,
    decoder_model,
    encoder_model,
)

__all__ = [
    "PAPER_PARAMETER_COUNTS_M",
    "IncrementalDecoder",
    "TransformerConfig",
    "TransformerLayers",
    "TransformerStack",
    "build_transformer",
    "decoder_model",
    "encoder_model",
    "get_preset",
    "presets",
]

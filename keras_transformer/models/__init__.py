"""The paper's model: configuration, presets (Table 3), the builder and its stack;
and the Image Transformer (Parmar et al., 2018): its configuration and builder.
"""

from keras_transformer.models.config import TransformerConfig
from keras_transformer.models.image_config import (
    ImageTransformerConfig,
    image_presets,
)
from keras_transformer.models.image_transformer import (
    ImageTransformerStack,
    build_image_transformer,
    image_bits_per_dim,
)
from keras_transformer.models.presets import (
    PAPER_PARAMETER_COUNTS_M,
    get_preset,
    presets,
)
from keras_transformer.models.transformer import (
    TransformerStack,
    build_transformer,
    decoder_model,
    encoder_model,
)

__all__ = [
    "PAPER_PARAMETER_COUNTS_M",
    "ImageTransformerConfig",
    "ImageTransformerStack",
    "TransformerConfig",
    "TransformerStack",
    "build_image_transformer",
    "build_transformer",
    "decoder_model",
    "encoder_model",
    "get_preset",
    "image_bits_per_dim",
    "image_presets",
    "presets",
]

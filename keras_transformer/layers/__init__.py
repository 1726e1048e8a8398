"""Keras layers of the Transformer.

Written in `keras` / `keras.ops`, so they run on every Keras backend; on
TensorFlow a few hot spots (linear maps, layer normalization, the masked
softmax, dropout, residual sums) use fused kernels and hand-written
gradients with the same results, through the dispatch functions of
`keras_transformer.backend`.
"""

from keras_transformer.layers.attention import AttentionResult, MultiHeadAttention
from keras_transformer.layers.attention_settings import AttentionSettings
from keras_transformer.layers.decoder_block import DecoderBlock
from keras_transformer.layers.dropout import Dropout
from keras_transformer.layers.embedding import ScaledEmbedding
from keras_transformer.layers.encoder_block import EncoderBlock
from keras_transformer.layers.feed_forward import FeedForward
from keras_transformer.layers.image_block import ImageTransformerBlock
from keras_transformer.layers.image_embedding import ImageEmbedding
from keras_transformer.layers.local_attention import (
    LocalBlockAttention,
    RestrictedMultiHeadAttention,
    local_block_attention_mask,
    restricted_attention_mask,
)
from keras_transformer.layers.local_attention_2d import (
    LocalAttention2D,
    generation_positions,
    local_2d_attention_mask,
)
from keras_transformer.layers.masking import (
    causal_mask,
    merge_attention_masks,
    padding_mask,
)
from keras_transformer.layers.normalization import LayerNormalization
from keras_transformer.layers.pixel_outputs import (
    CategoricalPixelHead,
    DiscretizedLogisticMixtureHead,
)
from keras_transformer.layers.position import (
    PositionEmbedding,
    SinusoidalPositionEncoding,
    sinusoidal_encoding,
)
from keras_transformer.layers.scaled_attention import scaled_dot_product_attention

__all__ = [
    "AttentionResult",
    "AttentionSettings",
    "CategoricalPixelHead",
    "DecoderBlock",
    "DiscretizedLogisticMixtureHead",
    "Dropout",
    "EncoderBlock",
    "FeedForward",
    "ImageEmbedding",
    "ImageTransformerBlock",
    "LayerNormalization",
    "LocalAttention2D",
    "LocalBlockAttention",
    "MultiHeadAttention",
    "PositionEmbedding",
    "RestrictedMultiHeadAttention",
    "ScaledEmbedding",
    "SinusoidalPositionEncoding",
    "causal_mask",
    "generation_positions",
    "local_2d_attention_mask",
    "local_block_attention_mask",
    "merge_attention_masks",
    "padding_mask",
    "restricted_attention_mask",
    "scaled_dot_product_attention",
    "sinusoidal_encoding",
]

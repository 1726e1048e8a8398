"""Keras layers of the Transformer (pure `keras` / `keras.ops`)."""

from keras_transformer.layers.attention import (
    MultiHeadAttention,
    scaled_dot_product_attention,
)
from keras_transformer.layers.decoder_block import DecoderBlock
from keras_transformer.layers.embedding import ScaledEmbedding
from keras_transformer.layers.encoder_block import EncoderBlock
from keras_transformer.layers.feed_forward import FeedForward
from keras_transformer.layers.local_attention import (
    LocalBlockAttention,
    RestrictedMultiHeadAttention,
    local_block_attention_mask,
    restricted_attention_mask,
)
from keras_transformer.layers.masking import (
    causal_mask,
    merge_attention_masks,
    padding_mask,
)
from keras_transformer.layers.position import (
    PositionEmbedding,
    SinusoidalPositionEncoding,
    sinusoidal_encoding,
)

__all__ = [
    "DecoderBlock",
    "EncoderBlock",
    "FeedForward",
    "LocalBlockAttention",
    "MultiHeadAttention",
    "PositionEmbedding",
    "RestrictedMultiHeadAttention",
    "ScaledEmbedding",
    "SinusoidalPositionEncoding",
    "causal_mask",
    "local_block_attention_mask",
    "merge_attention_masks",
    "padding_mask",
    "restricted_attention_mask",
    "scaled_dot_product_attention",
    "sinusoidal_encoding",
]

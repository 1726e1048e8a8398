"""`build_classifier`: an encoder-only stack of the paper's layers for sentiment.

The model of the attention_keras IMDB test that the project reproduces
(examples/03_text_classification.ipynb): token embeddings scaled by
sqrt(d_model) (§3.4), the sinusoidal positions of Eqs. 5-6 (or learned ones,
Table 3 row E), ``num_encoder_layers`` encoder blocks (§3.1), mean pooling
over the real tokens and one sigmoid unit, P(positive).
"""

from __future__ import annotations

import keras

from keras_transformer.layers import (
    EncoderBlock,
    PositionEmbedding,
    ScaledEmbedding,
    SinusoidalPositionEncoding,
)
from keras_transformer.models.config import TransformerConfig
from keras_transformer.models.transformer import block_arguments

__all__ = ["build_classifier"]


def build_classifier(
    config: TransformerConfig, dtype: str | None = None
) -> keras.Model:
    """A binary text classifier ``token_ids (batch, length) -> P(positive) (batch, 1)``.

    Args:
        config: its sizes: ``vocabulary_size``, ``d_model``, ``num_heads``,
            ``d_ff``, ``num_encoder_layers``, ``dropout`` (on the embeddings,
            each sub-layer and the pooled vector), ``position_encoding``
            (``"sinusoidal"``, ``"learned"`` or ``"none"``: no position
            information, so the mean-pooled prediction ignores word order) and
            ``max_length`` (for learned positions); the decoder settings are
            not used.
        dtype: a Keras dtype policy (e.g. ``"mixed_bfloat16"``); ``None``
            for the global one. The probability is float32 either way.

    Returns:
        The uncompiled `keras.Model`; id 0 is padding and is masked out of
        the attention and the pooling.
    """
    token_ids = keras.Input(shape=(None,), dtype="int32", name="token_ids")
    x = ScaledEmbedding(
        config.vocabulary_size, config.d_model, mask_zero=True, dtype=dtype
    )(token_ids)
    if config.position_encoding == "learned":
        x = PositionEmbedding(max_length=config.max_length, dtype=dtype)(x)
    elif config.position_encoding == "sinusoidal":
        x = SinusoidalPositionEncoding(dtype=dtype)(x)
    # "none": no position information, the word-order ablation.
    x = keras.layers.Dropout(config.dropout, dtype=dtype)(x)
    # The encoder blocks of `build_transformer`, with the same settings.
    block_args = block_arguments(config, dtype)
    for _ in range(config.num_encoder_layers):
        x = EncoderBlock(**block_args)(x)
    x = keras.layers.GlobalAveragePooling1D(dtype=dtype)(x)  # real tokens only
    x = keras.layers.Dropout(config.dropout, dtype=dtype)(x)
    positive = keras.layers.Dense(
        1, activation="sigmoid", dtype="float32", name="positive"
    )(x)
    return keras.Model(token_ids, positive, name="classifier")

"""Attention heat maps of one translation, as images for TensorBoard.

This module is the one place where training depends on `kt.visualize`.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import keras
import numpy as np

from keras_transformer.conventions import PAD_ID
from keras_transformer.data import SubwordTokenizer

__all__ = ["attention_image"]


def attention_image(
    model: keras.Model,
    tokenizer: SubwordTokenizer,
    source_ids: Sequence[int],
    output_ids: Sequence[int],
    layer: int = -1,
) -> np.ndarray:
    """The encoder-decoder attention of every head of one layer, as an image.

    The decoder is fed the start token and the model's own output (teacher
    forcing on its translation), so row `i` shows where the model looked
    while emitting output token `i`.

    Args:
        model: a model from `build_transformer`.
        tokenizer: labels the axes with subword pieces.
        source_ids: the source, END included, without padding.
        output_ids: the model's output (END included, no START).
        layer: the decoder layer (default: the last).

    Returns:
        uint8 ``(1, height, width, 4)`` RGBA, ready for `tf.summary.image`.
    """
    from keras_transformer import visualize

    source_ids = [int(i) for i in source_ids if int(i) != PAD_ID]
    output_ids = [int(i) for i in output_ids if int(i) != PAD_ID] or [tokenizer.END_ID]
    target_ids = [tokenizer.START_ID, *output_ids[:-1]]
    with warnings.catch_warnings():
        # A one-token target makes Keras warn about a softmax over one key.
        warnings.simplefilter("ignore", UserWarning)
        maps = visualize.attention_maps(
            model, np.asarray([source_ids], "int32"), np.asarray([target_ids], "int32")
        )
    pieces = [tokenizer.id_to_piece(i) for i in source_ids]
    outputs = [tokenizer.id_to_piece(i) for i in output_ids]
    figure = visualize.plot_heads(maps, layer, "encoder_decoder", pieces, outputs)
    return np.asarray(visualize.figure_to_image(figure, dpi=72))[np.newaxis]

"""Attention heat maps of one translation, as images for TensorBoard.

This module is the one place where training depends on `kt.visualize`.
`attention_images` draws one image per layer and kind of attention (encoder
self-attention, decoder self-attention, encoder-decoder attention), every
head of the layer in a grid; `AttentionImages` writes them as
``attention/<kind>/layer_<i>``.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import keras
import numpy as np

from keras_transformer.conventions import PAD_ID
from keras_transformer.data import SubwordTokenizer

__all__ = ["attention_image", "attention_images", "image_tag"]

#: Resolution of the images written to TensorBoard (a 10-point label is
#: 12 pixels high).
IMAGE_DPI = 90


def image_tag(kind: str, layer: int) -> str:
    """The TensorBoard tag of one image, e.g. ``attention/encoder_self/layer_0``."""
    return f"attention/{kind}/layer_{layer}"


def _maps_and_labels(
    model: keras.Model,
    tokenizer: SubwordTokenizer,
    source_ids: Sequence[int],
    output_ids: Sequence[int],
) -> tuple[dict[str, np.ndarray], dict[str, tuple[list[str], list[str]]]]:
    """The attention maps of teacher forcing on the output, and per kind the
    (key labels, query labels)."""
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
    sources = [tokenizer.id_to_piece(i) for i in source_ids]
    inputs = [tokenizer.id_to_piece(i) for i in target_ids]
    outputs = [tokenizer.id_to_piece(i) for i in output_ids]
    labels = {
        "encoder_self": (sources, sources),
        # Row i is the decoder input i, whose output is output token i.
        "decoder_self": (inputs, inputs),
        "encoder_decoder": (sources, outputs),
    }
    return maps, labels


def attention_image(
    model: keras.Model,
    tokenizer: SubwordTokenizer,
    source_ids: Sequence[int],
    output_ids: Sequence[int],
    layer: int = -1,
    kind: str = "encoder_decoder",
) -> np.ndarray:
    """The attention of every head of one layer, as an image.

    The decoder is fed the start token and the model's own output (teacher
    forcing on its translation), so row `i` shows where the model looked
    while emitting output token `i`.

    Args:
        model: a model from `build_transformer`.
        tokenizer: labels the axes with subword pieces.
        source_ids: the source, END included, without padding.
        output_ids: the model's output (END included, no START).
        layer: the layer (default: the last).
        kind: ``"encoder_decoder"`` (the default), ``"encoder_self"`` or
            ``"decoder_self"``.

    Returns:
        uint8 ``(1, height, width, 4)`` RGBA, ready for `tf.summary.image`.
    """
    from keras_transformer import visualize

    maps, labels = _maps_and_labels(model, tokenizer, source_ids, output_ids)
    figure = visualize.plot_heads(maps, layer, kind, *labels[kind])
    return np.asarray(visualize.figure_to_image(figure, dpi=IMAGE_DPI))[np.newaxis]


def attention_images(
    model: keras.Model,
    tokenizer: SubwordTokenizer,
    source_ids: Sequence[int],
    output_ids: Sequence[int],
) -> dict[str, np.ndarray]:
    """Every layer and kind of attention of one translation, one image each.

    Args:
        model: a model from `build_transformer`.
        tokenizer: labels the axes with subword pieces.
        source_ids: the source, END included, without padding.
        output_ids: the model's output (END included, no START).

    Returns:
        ``{image_tag(kind, layer): uint8 (1, height, width, 4)}``, the
        encoder self-attention of every encoder layer, then the decoder
        self-attention and the encoder-decoder attention of every decoder
        layer; each image holds every head of its layer in a grid.
    """
    from keras_transformer import visualize

    maps, labels = _maps_and_labels(model, tokenizer, source_ids, output_ids)
    images: dict[str, np.ndarray] = {}
    for kind in visualize.KINDS:
        for layer in range(maps[kind].shape[0]):
            figure = visualize.plot_heads(maps, layer, kind, *labels[kind])
            pixels = visualize.figure_to_image(figure, dpi=IMAGE_DPI)
            images[image_tag(kind, layer)] = np.asarray(pixels)[np.newaxis]
    return images

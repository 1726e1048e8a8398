"""Attention maps of a trained model and heat-map plots of them.

`attention_maps` re-runs the encoder and decoder stacks of a
`build_transformer` model eagerly (`TransformerStack.encode` / `decode` with
`return_attention_scores=True`), collecting per layer and per head the
encoder self-attention, the decoder (masked) self-attention and the
encoder-decoder attention. `plot_attention` and `plot_heads` draw them as
labelled heat maps in the style of the paper's attention visualisations
(Figures 3-5), and `figure_to_image` renders a figure to an RGBA array for
`tf.summary.image`.

Plots use Matplotlib's object-oriented API with the Agg renderer (no pyplot
state, no display needed).

Example:
>>> import numpy as np, keras_transformer as kt
>>> from keras_transformer import visualize
>>> model = kt.models.build_transformer(kt.models.presets["tiny"])
>>> maps = visualize.attention_maps(model, np.array([[5, 6, 3]]), np.array([[2, 7]]))
>>> maps["encoder_decoder"].shape  # (layers, batch, heads, target, source)
(2, 1, 4, 2, 3)
>>> figure = visualize.plot_heads(maps, 0, "encoder_decoder", list("abc"), list("xy"))
>>> visualize.figure_to_image(figure).dtype
dtype('uint8')
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from typing import Any

import keras
import numpy as np
from keras import ops
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from keras_transformer.conventions import PAD_ID
from keras_transformer.models.transformer import ATTENTION_KINDS, TransformerStack

#: The three kinds of attention, keys of `attention_maps`.
KINDS = ATTENTION_KINDS
_TITLES = {
    "encoder_self": "encoder self-attention",
    "decoder_self": "decoder self-attention",
    "encoder_decoder": "encoder-decoder attention",
}


def _as_ids(name: str, ids: Any) -> np.ndarray:
    array = np.asarray(ids)
    if array.ndim == 1:
        array = array[None]
    if array.ndim != 2 or not np.issubdtype(array.dtype, np.integer):
        raise ValueError(
            f"`{name}` must be integer token ids of shape (batch, length) or "
            f"(length,). Received: {name}.shape={array.shape}, dtype={array.dtype}"
        )
    return array.astype("int32")


def _forward(
    model: keras.Model, source_ids: Any, target_ids: Any
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The attention maps and the logits of one eager inference pass."""
    stack = TransformerStack.of(model)
    source = _as_ids("source_ids", source_ids)
    target = _as_ids("target_ids", target_ids)
    if source.shape[0] != target.shape[0]:
        raise ValueError(
            "`source_ids` and `target_ids` must have the same batch size. "
            f"Received: {source.shape[0]} and {target.shape[0]}"
        )
    # Inference: no dropout.
    encoder_output, encoder_scores = stack.encode(
        source, training=False, return_attention_scores=True
    )
    logits, decoder_scores = stack.decode(
        target,
        encoder_output,
        ops.not_equal(source, PAD_ID),
        training=False,
        return_attention_scores=True,
    )
    maps = {**encoder_scores, **decoder_scores}
    stacked = {
        kind: np.stack([ops.convert_to_numpy(s) for s in maps[kind]]).astype("float32")
        for kind in KINDS
    }
    return stacked, ops.convert_to_numpy(logits)


def attention_maps(
    model: keras.Model, source_ids: Any, target_ids: Any
) -> dict[str, np.ndarray]:
    """Per-layer, per-head attention weights of a `build_transformer` model.

    Args:
        model: a model from `build_transformer` (or loaded from its file).
        source_ids: int `(batch, source_length)` (or one `(source_length,)`
            sequence), 0 for padding.
        target_ids: int `(batch, target_length)`: the decoder inputs, i.e.
            the start token followed by the target shifted right.

    Returns:
        A dict of float32 arrays (each row is a softmax over the keys; masked
        keys have weight 0, padded query rows are all 0):

        - `"encoder_self"`: `(encoder_layers, batch, heads, source, source)`,
        - `"decoder_self"`: `(decoder_layers, batch, heads, target, target)`,
          lower-triangular (the decoder's causal mask, §3.2.3),
        - `"encoder_decoder"`: `(decoder_layers, batch, heads, target,
          source)`.

    Reference: Vaswani et al. (2017), §3.2.3 and Figures 3-5.
    """
    return _forward(model, source_ids, target_ids)[0]


def _labels(name: str, labels: Sequence[Any] | None, size: int) -> list[str]:
    if labels is None:
        return [str(i) for i in range(size)]
    labels = [str(label) for label in labels]
    if len(labels) > size:
        raise ValueError(
            f"`{name}` has {len(labels)} labels but the weights have only {size} "
            f"positions along that axis. Received: {name}={labels!r}"
        )
    return labels


def plot_attention(
    weights: Any,
    x_labels: Sequence[Any] | None = None,
    y_labels: Sequence[Any] | None = None,
    ax: Axes | None = None,
    title: str | None = None,
) -> Figure:
    """A labelled heat map of one attention matrix.

    Args:
        weights: `(queries, keys)` attention weights, e.g.
            `maps["encoder_decoder"][layer, example, head]`.
        x_labels: labels of the keys (columns), e.g. the source tokens. When
            shorter than the number of keys, only the first `len(x_labels)`
            columns are drawn (so padding can be left out); `None` numbers
            them.
        y_labels: labels of the queries (rows), likewise.
        ax: draw into these axes; a new figure when `None`.
        title: title of the axes.

    Returns:
        The figure that holds the plot.
    """
    weights = np.asarray(weights, "float32")
    if weights.ndim != 2:
        raise ValueError(
            "`weights` must be one attention matrix (queries, keys). "
            f"Received: weights.shape={weights.shape}"
        )
    x_labels = _labels("x_labels", x_labels, weights.shape[1])
    y_labels = _labels("y_labels", y_labels, weights.shape[0])
    weights = weights[: len(y_labels), : len(x_labels)]
    if ax is None:
        figure = Figure(
            figsize=(1.5 + 0.35 * len(x_labels), 1.0 + 0.35 * len(y_labels))
        )
        FigureCanvasAgg(figure)
        ax = figure.add_subplot()
        colorbar = True
    else:
        colorbar = False
    image = ax.imshow(weights, cmap="viridis", vmin=0.0, aspect="auto")
    ax.set_xticks(range(len(x_labels)), x_labels, rotation=90, fontsize="small")
    ax.set_yticks(range(len(y_labels)), y_labels, fontsize="small")
    ax.tick_params(length=0)
    if title is not None:
        ax.set_title(title, fontsize="medium")
    if colorbar:
        ax.figure.colorbar(image, ax=ax, fraction=0.05)
        ax.figure.tight_layout()
    return ax.figure


def plot_heads(
    maps: dict[str, np.ndarray],
    layer: int,
    kind: str,
    x_labels: Sequence[Any] | None = None,
    y_labels: Sequence[Any] | None = None,
    example: int = 0,
    columns: int = 4,
) -> Figure:
    """Every head of one layer side by side (as the paper's Figures 4-5).

    Args:
        maps: from `attention_maps`.
        layer: layer index (negative counts from the last layer).
        kind: `"encoder_self"`, `"decoder_self"` or `"encoder_decoder"`.
        x_labels: labels of the keys (source tokens for the encoder
            self-attention and encoder-decoder attention, target inputs for
            the decoder self-attention).
        y_labels: labels of the queries.
        example: which example of the batch.
        columns: number of heads per row of the grid.

    Returns:
        A figure with one heat map per head.
    """
    if kind not in KINDS:
        raise ValueError(f"`kind` must be one of {KINDS}. Received: kind={kind!r}")
    weights = np.asarray(maps[kind])
    num_layers, batch, num_heads = weights.shape[:3]
    if not -num_layers <= layer < num_layers:
        raise ValueError(
            f"`layer` must be in [{-num_layers}, {num_layers}) for {kind!r}. "
            f"Received: layer={layer!r}"
        )
    if not -batch <= example < batch:
        raise ValueError(
            f"`example` must be in [{-batch}, {batch}). Received: example={example!r}"
        )
    columns = max(1, min(columns, num_heads))
    rows = math.ceil(num_heads / columns)
    width = len(x_labels) if x_labels is not None else weights.shape[-1]
    height = len(y_labels) if y_labels is not None else weights.shape[-2]
    figure = Figure(
        figsize=(columns * (1.0 + 0.3 * width), rows * (1.2 + 0.3 * height)),
        layout="constrained",
    )
    FigureCanvasAgg(figure)
    axes = figure.subplots(rows, columns, squeeze=False)
    for head, ax in enumerate(axes.flat):
        if head >= num_heads:
            ax.set_axis_off()
            continue
        plot_attention(
            weights[layer, example, head],
            x_labels,
            y_labels,
            ax=ax,
            title=f"head {head}",
        )
    layer_number = layer % num_layers
    figure.suptitle(f"{_TITLES[kind]}, layer {layer_number}")
    return figure


def figure_to_image(figure: Figure, dpi: float | None = None) -> np.ndarray:
    """Renders `figure` as PNG and returns the pixels, for TensorBoard.

    Args:
        figure: a Matplotlib figure (e.g. from `plot_heads`).
        dpi: resolution; the figure's own when `None`.

    Returns:
        uint8 `(height, width, 4)` RGBA pixels. `tf.summary.image(name,
        image[None], step)` logs it.
    """
    buffer = io.BytesIO()
    if figure.canvas is None or not isinstance(figure.canvas, FigureCanvasAgg):
        FigureCanvasAgg(figure)
    figure.savefig(buffer, format="png", dpi=dpi or figure.dpi)
    buffer.seek(0)
    from matplotlib.image import imread

    pixels = imread(buffer, format="png")
    if pixels.dtype != np.uint8:
        pixels = np.round(pixels * 255).astype("uint8")
    return pixels


__all__ = [
    "KINDS",
    "attention_maps",
    "figure_to_image",
    "plot_attention",
    "plot_heads",
]

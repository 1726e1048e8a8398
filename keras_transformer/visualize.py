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
from keras_transformer.validation import check_positive_int

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
    if array.size == 0:
        raise ValueError(
            f"`{name}` holds no token ids. Received: {name}.shape={array.shape}. "
            "Pass at least one id per sequence (the tokenizer's ids, END last)."
        )
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


def _token_fontsize(num_tokens: int) -> float:
    """Points per label: 10 for short sentences, down to 6 for 64 tokens."""
    return float(np.clip(11.0 - num_tokens / 12.0, 6.0, 10.0))


def _label_width(labels: Sequence[str], fontsize: float) -> float:
    """Inches the longest label takes (about 0.6 em per character)."""
    longest = max((len(label) for label in labels), default=1)
    return 0.6 * fontsize / 72 * longest + 0.1


def plot_attention(
    weights: Any,
    x_labels: Sequence[Any] | None = None,
    y_labels: Sequence[Any] | None = None,
    ax: Axes | None = None,
    title: str | None = None,
    fontsize: float | str | None = None,
    show_x_labels: bool = True,
    show_y_labels: bool = True,
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
        fontsize: size of the token labels, in points or a Matplotlib name
            such as ``"small"``; `None` scales it to the number of tokens
            (10 points for a short sentence, down to 6 for 64 tokens).
        show_x_labels, show_y_labels: whether to write the token labels
            along each axis (`plot_heads` writes them once per row and
            column of its grid).

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
    if fontsize is None:
        fontsize = _token_fontsize(max(len(x_labels), len(y_labels)))
    if ax is None:
        points = fontsize if isinstance(fontsize, (int, float)) else 8.0
        cell = 1.6 * points / 72
        figure = Figure(
            figsize=(
                max(2.5, 1.0 + _label_width(y_labels, points) + cell * len(x_labels)),
                max(2.0, 0.8 + _label_width(x_labels, points) + cell * len(y_labels)),
            )
        )
        FigureCanvasAgg(figure)
        ax = figure.add_subplot()
        colorbar = True
    else:
        colorbar = False
    image = ax.imshow(weights, cmap="viridis", vmin=0.0, aspect="auto")
    ax.set_xticks(
        range(len(x_labels)),
        x_labels if show_x_labels else [],
        rotation=90,
        fontsize=fontsize,
    )
    ax.set_yticks(
        range(len(y_labels)), y_labels if show_y_labels else [], fontsize=fontsize
    )
    ax.tick_params(length=0)
    if title is not None:
        ax.set_title(title, fontsize="medium")
    if colorbar:
        ax.figure.colorbar(image, ax=ax, fraction=0.05)
        ax.figure.tight_layout()
    return ax.figure


def grid_shape(num_heads: int, columns: int | None = None) -> tuple[int, int]:
    """(rows, columns) of the grid `plot_heads` draws `num_heads` heads in.

    With `columns` `None` the grid is as square as it can be with no more
    rows than columns: 2 x 2 for 4 heads, 2 x 4 for 8, 4 x 4 for 16.
    """
    if num_heads < 1:
        raise ValueError(f"`num_heads` must be positive. Received: {num_heads}")
    check_positive_int("columns", columns, allow_none=True)
    if columns is None:
        rows = max(1, math.isqrt(num_heads))
        columns = math.ceil(num_heads / rows)
    columns = max(1, min(columns, num_heads))
    return math.ceil(num_heads / columns), columns


def _layer_weights(
    maps: dict[str, np.ndarray], kind: str, layer: int, example: int
) -> np.ndarray:
    """``maps[kind]`` as an array `(layers, batch, heads, queries, keys)`,
    after checking `kind`, `layer` and `example` against it."""
    if kind not in KINDS:
        raise ValueError(f"`kind` must be one of {KINDS}. Received: kind={kind!r}")
    weights = np.asarray(maps[kind])
    num_layers, batch = weights.shape[:2]
    if not -num_layers <= layer < num_layers:
        raise ValueError(
            f"`layer` must be in [{-num_layers}, {num_layers}) for {kind!r}. "
            f"Received: layer={layer!r}"
        )
    if not -batch <= example < batch:
        raise ValueError(
            f"`example` must be in [{-batch}, {batch}). Received: example={example!r}"
        )
    return weights


def _grid_figsize(
    grid: tuple[int, int],
    x_names: Sequence[str],
    y_names: Sequence[str],
    fontsize: float,
    label_outer: bool,
) -> tuple[float, float]:
    """The size in inches of a `(rows, columns)` grid of heat maps: one token
    per 1.6 label heights, with room for the labels and titles."""
    rows, columns = grid
    cell = 1.6 * fontsize / 72
    panel_width = max(1.2, cell * len(x_names))
    panel_height = max(1.0, cell * len(y_names))
    label_columns = 1 if label_outer else columns
    label_rows = 1 if label_outer else rows
    return (
        columns * (panel_width + 0.15)
        + label_columns * _label_width(y_names, fontsize)
        + 0.3
        + 0.9,  # the colour bar and its ticks
        rows * (panel_height + 0.35)
        + label_rows * _label_width(x_names, fontsize)
        + 0.5,
    )


def plot_heads(
    maps: dict[str, np.ndarray],
    layer: int,
    kind: str,
    x_labels: Sequence[Any] | None = None,
    y_labels: Sequence[Any] | None = None,
    example: int = 0,
    columns: int | None = None,
    fontsize: float | None = None,
    label_outer: bool = True,
) -> Figure:
    """Every head of one layer in a grid (as the paper's Figures 4-5).

    The figure grows with the number of tokens and the token labels shrink
    (from 10 to 6 points), so that every label keeps its own row or column
    and stays legible; the key labels are rotated.

    Args:
        maps: from `attention_maps`.
        layer: layer index (negative counts from the last layer).
        kind: `"encoder_self"`, `"decoder_self"` or `"encoder_decoder"`.
        x_labels: labels of the keys (source tokens for the encoder
            self-attention and encoder-decoder attention, target inputs for
            the decoder self-attention).
        y_labels: labels of the queries.
        example: which example of the batch.
        columns: number of heads per row of the grid; `None` (the default)
            makes the grid as square as possible (`grid_shape`: 2 x 4 for 8
            heads).
        fontsize: size of the token labels in points; `None` scales it to
            the number of tokens.
        label_outer: write the key labels under the bottom row and the query
            labels left of the first column only (all heads share them);
            `False` labels every head.

    Returns:
        A figure with one heat map per head, all on one colour scale (from
        0 to the largest weight shown), and its colour bar.
    """
    weights = _layer_weights(maps, kind, layer, example)
    num_layers, _, num_heads = weights.shape[:3]
    rows, columns = grid_shape(num_heads, columns)
    x_names = _labels("x_labels", x_labels, weights.shape[-1])
    y_names = _labels("y_labels", y_labels, weights.shape[-2])
    if fontsize is None:
        fontsize = _token_fontsize(max(len(x_names), len(y_names)))
    figure = Figure(
        figsize=_grid_figsize((rows, columns), x_names, y_names, fontsize, label_outer),
        layout="constrained",
    )
    FigureCanvasAgg(figure)
    axes = figure.subplots(rows, columns, squeeze=False)
    # One colour scale for every head, so that their colours compare.
    shown = weights[layer, example, :, : len(y_names), : len(x_names)]
    top = max(float(shown.max()), 1e-6)
    for head, ax in enumerate(axes.flat):
        if head >= num_heads:
            ax.set_axis_off()
            continue
        # The last head of a column: in the bottom row or above an empty cell.
        last_in_column = head + columns >= num_heads
        plot_attention(
            weights[layer, example, head],
            x_labels,
            y_labels,
            ax=ax,
            title=f"head {head}",
            fontsize=fontsize,
            show_x_labels=not label_outer or last_in_column,
            show_y_labels=not label_outer or head % columns == 0,
        )
        ax.images[0].set_clim(0.0, top)
    figure.colorbar(axes.flat[0].images[0], ax=axes, label="attention weight")
    layer_number = layer % num_layers
    figure.suptitle(f"{_TITLES[kind]}, layer {layer_number}")
    return figure


def figure_to_image(figure: Figure, dpi: float | None = None) -> np.ndarray:
    """Draws `figure` with Agg and returns its pixels, for TensorBoard.

    The pixels are those ``figure.savefig(..., format="png")`` writes at
    the same resolution (with Matplotlib's default ``savefig.*`` settings),
    without encoding and decoding a PNG.

    Args:
        figure: a Matplotlib figure (e.g. from `plot_heads`).
        dpi: resolution; the figure's own when `None` (the figure keeps its
            own afterwards).

    Returns:
        uint8 `(height, width, 4)` RGBA pixels. `tf.summary.image(name,
        image[None], step)` logs it.
    """
    canvas = figure.canvas
    if not isinstance(canvas, FigureCanvasAgg):
        canvas = FigureCanvasAgg(figure)
    own_dpi = figure.dpi
    figure.set_dpi(dpi or own_dpi)
    try:
        canvas.draw()
        return np.array(canvas.buffer_rgba(), dtype=np.uint8)
    finally:
        figure.set_dpi(own_dpi)


__all__ = [
    "KINDS",
    "attention_maps",
    "figure_to_image",
    "grid_shape",
    "plot_attention",
    "plot_heads",
]

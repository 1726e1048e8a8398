"""kt.visualize: attention maps and their heat-map plots."""

import keras
import numpy as np
import pytest
from matplotlib.figure import Figure

from keras_transformer import visualize
from keras_transformer.models import build_transformer, presets

# Real lengths: sources 4 and 2 tokens, targets 4 and 2 tokens.
SOURCE = np.array([[5, 6, 7, 3, 0, 0], [8, 3, 0, 0, 0, 0]], "int32")
TARGET = np.array([[2, 9, 10, 11, 0], [2, 12, 0, 0, 0]], "int32")
SOURCE_REAL = SOURCE != 0
TARGET_REAL = TARGET != 0


@pytest.fixture(scope="module", params=["post_ln", "pre_ln"])
def model(request):
    keras.utils.set_random_seed(3)
    config = presets["tiny"].replace(norm_first=request.param == "pre_ln")
    return build_transformer(config)


@pytest.fixture(scope="module")
def maps(model):
    return visualize.attention_maps(model, SOURCE, TARGET)


def test_shapes(maps):
    assert set(maps) == set(visualize.KINDS)
    assert maps["encoder_self"].shape == (2, 2, 4, 6, 6)
    assert maps["decoder_self"].shape == (2, 2, 4, 5, 5)
    assert maps["encoder_decoder"].shape == (2, 2, 4, 5, 6)
    assert all(m.dtype == np.float32 for m in maps.values())


def test_same_computation_as_the_model(model):
    _, logits = visualize._forward(model, SOURCE, TARGET)
    expected = model([SOURCE, TARGET], training=False)
    np.testing.assert_allclose(logits, np.asarray(expected), atol=1e-4)


@pytest.mark.parametrize(
    ("kind", "queries", "keys"),
    [
        ("encoder_self", SOURCE_REAL, SOURCE_REAL),
        ("decoder_self", TARGET_REAL, TARGET_REAL),
        ("encoder_decoder", TARGET_REAL, SOURCE_REAL),
    ],
)
def test_rows_are_distributions_over_real_keys(maps, kind, queries, keys):
    weights = maps[kind]  # (layers, batch, heads, queries, keys)
    sums = weights.sum(-1)
    real_rows = np.broadcast_to(queries[None, :, None, :], sums.shape)
    np.testing.assert_allclose(sums[real_rows], 1.0, atol=1e-5)
    # Padded queries attend nowhere; padded keys get exactly zero weight.
    assert np.all(sums[~real_rows] == 0)
    padded_keys = np.broadcast_to(~keys[None, :, None, None, :], weights.shape)
    assert np.all(weights[padded_keys] == 0)


def test_decoder_self_attention_is_causal(maps):
    upper = np.triu(np.ones((5, 5), bool), k=1)
    assert np.all(maps["decoder_self"][..., upper] == 0)


def test_single_sequences_are_a_batch_of_one(model):
    maps = visualize.attention_maps(model, [5, 6, 3], [2, 7])
    assert maps["encoder_decoder"].shape == (2, 1, 4, 2, 3)


def test_bad_inputs_raise(model):
    with pytest.raises(ValueError, match="batch size"):
        visualize.attention_maps(model, SOURCE, TARGET[:1])
    with pytest.raises(ValueError, match="source_ids"):
        visualize.attention_maps(model, np.zeros((1, 2, 3), "int32"), TARGET)
    # An empty list became float64 and was told to be integer ids.
    with pytest.raises(ValueError, match="`target_ids` holds no token ids"):
        visualize.attention_maps(model, SOURCE, [[]])


def test_plot_attention_and_image(maps):
    source_labels = ["a", "b", "c", "</s>"]  # padding columns are left out
    figure = visualize.plot_attention(
        maps["encoder_decoder"][0, 0, 0],
        source_labels,
        ["<s>", "x", "y", "z", "pad"],
        title="layer 0, head 0",
    )
    assert isinstance(figure, Figure)
    ax = figure.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == source_labels
    assert ax.images[0].get_array().shape == (5, 4)
    assert ax.get_title() == "layer 0, head 0"
    image = visualize.figure_to_image(figure, dpi=50)
    width, height = figure.get_size_inches() * 50
    assert image.shape[2] == 4
    assert abs(image.shape[0] - height) <= 1 and abs(image.shape[1] - width) <= 1
    assert image.dtype == np.uint8 and image.max() > 0


def test_figure_to_image_gives_the_png_pixels_and_keeps_the_figures_dpi(maps):
    """The Agg buffer holds what ``savefig(format="png")`` writes of the
    same figure (drawn once: constrained layout moves on a second draw)."""
    import io

    from matplotlib.image import imread

    def figure():
        return visualize.plot_heads(maps, 0, "encoder_decoder", list("abcd"), None)

    for dpi in (None, 45):
        saved = figure()
        buffer = io.BytesIO()
        saved.savefig(buffer, format="png", dpi=dpi or saved.dpi)
        buffer.seek(0)
        png = np.round(imread(buffer, format="png") * 255).astype("uint8")
        drawn = figure()
        own_dpi = drawn.dpi
        np.testing.assert_array_equal(visualize.figure_to_image(drawn, dpi), png)
        assert drawn.dpi == own_dpi


def test_plot_attention_into_given_axes(maps):
    figure = Figure()
    ax = figure.add_subplot()
    assert visualize.plot_attention(maps["decoder_self"][1, 1, 2], ax=ax) is figure
    assert ax.images[0].get_array().shape == (5, 5)
    with pytest.raises(ValueError, match="x_labels"):
        visualize.plot_attention(np.eye(2), ["a", "b", "c"])
    with pytest.raises(ValueError, match="weights"):
        visualize.plot_attention(np.ones((2, 2, 2)))


def test_plot_heads(maps):
    figure = visualize.plot_heads(
        maps, -1, "decoder_self", ["<s>", "x", "y"], ["<s>", "x", "y"], columns=3
    )
    heat_maps = [ax for ax in figure.axes if ax.images]
    assert len(heat_maps) == 4
    assert [ax.get_title() for ax in heat_maps] == [f"head {h}" for h in range(4)]
    assert "layer 1" in figure.get_suptitle()
    image = visualize.figure_to_image(figure, dpi=40)
    assert image.ndim == 3 and image.shape[-1] == 4
    with pytest.raises(ValueError, match="kind"):
        visualize.plot_heads(maps, 0, "cross", None, None)
    with pytest.raises(ValueError, match="layer"):
        visualize.plot_heads(maps, 2, "encoder_self", None, None)


def test_plot_heads_one_colour_scale_and_its_bar(maps):
    figure = visualize.plot_heads(maps, 0, "encoder_self", ["a", "b", "c", "d"])
    heat_maps = [ax for ax in figure.axes if ax.images]
    shown = maps["encoder_self"][0, 0, :, :, :4]  # (heads, queries, 4 keys)
    # Every head on the same scale, from 0 to the largest weight drawn.
    for ax in heat_maps:
        assert ax.images[0].get_clim() == (0.0, pytest.approx(float(shown.max())))
    bars = [ax for ax in figure.axes if ax not in heat_maps and ax.get_visible()]
    assert len(bars) == 1 and bars[0].get_ylabel() == "attention weight"


def test_grid_shape():
    assert visualize.grid_shape(8) == (2, 4)
    assert visualize.grid_shape(4) == (2, 2)
    assert visualize.grid_shape(16) == (4, 4)
    assert visualize.grid_shape(2) == (1, 2) and visualize.grid_shape(1) == (1, 1)
    assert visualize.grid_shape(6) == (2, 3)
    assert visualize.grid_shape(4, columns=4) == (1, 4)  # the old default
    assert visualize.grid_shape(3, columns=10) == (1, 3)
    with pytest.raises(ValueError, match="num_heads"):
        visualize.grid_shape(0)
    # columns=0 drew one column without a word.
    with pytest.raises(ValueError, match="`columns` must be a positive integer"):
        visualize.grid_shape(4, columns=0)


def _heat_maps(figure):
    return [ax for ax in figure.axes if ax.images]


def _font_points(labels) -> set[float]:
    return {label.get_fontsize() for label in labels if label.get_text()}


@pytest.mark.parametrize("num_tokens", [6, 40])
def test_plot_heads_grid_readable_labels(num_tokens):
    rng = np.random.default_rng(0)
    weights = rng.random((1, 1, 8, num_tokens, num_tokens)).astype("float32")
    maps = {"encoder_self": weights}
    tokens = [f"tok{i}" for i in range(num_tokens)]
    figure = visualize.plot_heads(maps, 0, "encoder_self", tokens, tokens)
    axes = _heat_maps(figure)
    assert len(axes) == 8
    # Two rows of four heads: the axes' positions make a 2 x 4 grid.
    rows = sorted({round(ax.get_position().y0, 3) for ax in axes})
    columns = sorted({round(ax.get_position().x0, 3) for ax in axes})
    assert len(rows) == 2 and len(columns) == 4
    # Labels once per row and column: keys under the bottom row (rotated),
    # queries left of the first column, every token its own tick.
    labelled_x = [ax for ax in axes if any(t.get_text() for t in ax.get_xticklabels())]
    labelled_y = [ax for ax in axes if any(t.get_text() for t in ax.get_yticklabels())]
    assert len(labelled_x) == 4 and len(labelled_y) == 2
    x_labels = labelled_x[0].get_xticklabels()
    assert [t.get_text() for t in x_labels] == tokens
    assert {t.get_rotation() for t in x_labels} == {90.0}
    (points,) = _font_points(x_labels)
    assert 6 <= points <= 10
    # The figure grows with the tokens so that each one gets a label's room.
    width, height = figure.get_size_inches()
    assert width / (4 * num_tokens) >= 1.4 * points / 72
    assert height / (2 * num_tokens) >= 1.4 * points / 72
    # Every head labelled when asked, and an explicit font size is kept.
    figure = visualize.plot_heads(
        maps, 0, "encoder_self", tokens, tokens, label_outer=False, fontsize=9
    )
    for ax in _heat_maps(figure):
        assert _font_points(ax.get_xticklabels()) == {9.0}
        assert [t.get_text() for t in ax.get_yticklabels()] == tokens


def test_font_size_shrinks_with_the_number_of_tokens():
    rng = np.random.default_rng(1)
    sizes = []
    for num_tokens in (5, 30, 60):
        maps = {"decoder_self": rng.random((1, 1, 2, num_tokens, num_tokens))}
        figure = visualize.plot_heads(maps, 0, "decoder_self")
        (points,) = _font_points(_heat_maps(figure)[0].get_yticklabels())
        sizes.append(points)
    assert sizes[0] == 10 and sizes[0] > sizes[1] > sizes[2] >= 6

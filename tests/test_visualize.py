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

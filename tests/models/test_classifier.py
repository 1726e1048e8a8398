"""build_classifier: the position options, including the word-order ablation."""

import numpy as np
import pytest

from keras_transformer.models import build_transformer, presets
from keras_transformer.models.classifier import build_classifier

CONFIG = presets["tiny"].replace(
    vocabulary_size=50, num_encoder_layers=1, dropout=0.0, max_length=16
)
TOKENS = np.array([[5, 6, 7, 8, 9, 10, 0, 0], [11, 12, 13, 14, 0, 0, 0, 0]], "int32")
# The same tokens of each review in another order (padding stays at the end).
SHUFFLED = np.array([[10, 8, 5, 9, 7, 6, 0, 0], [14, 11, 13, 12, 0, 0, 0, 0]], "int32")


def _predict(position_encoding: str, tokens: np.ndarray) -> np.ndarray:
    model = build_classifier(CONFIG.replace(position_encoding=position_encoding))
    return np.asarray(model(tokens, training=False))


@pytest.mark.parametrize("position_encoding", ["sinusoidal", "learned"])
def test_positions_make_the_prediction_depend_on_word_order(position_encoding):
    model = build_classifier(CONFIG.replace(position_encoding=position_encoding))
    ordered = np.asarray(model(TOKENS, training=False))
    shuffled = np.asarray(model(SHUFFLED, training=False))
    assert ordered.shape == (2, 1)
    assert np.max(np.abs(ordered - shuffled)) > 1e-6


def test_without_positions_the_prediction_ignores_word_order():
    model = build_classifier(CONFIG.replace(position_encoding="none"))
    names = [layer.name for layer in model.layers]
    assert not any("position" in name for name in names), names
    ordered = np.asarray(model(TOKENS, training=False))
    shuffled = np.asarray(model(SHUFFLED, training=False))
    np.testing.assert_allclose(ordered, shuffled, rtol=1e-5, atol=1e-6)


def test_a_translation_model_refuses_no_positions():
    with pytest.raises(ValueError, match="only for classifiers"):
        build_transformer(CONFIG.replace(position_encoding="none"))


def test_an_unknown_position_encoding_lists_the_choices():
    with pytest.raises(ValueError, match="none"):
        CONFIG.replace(position_encoding="rotary")

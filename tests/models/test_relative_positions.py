"""Relative position representations (Shaw et al., 2018) in the models: the
config setting, training, the Image Transformer's cached step, the export.

The cached text decoding (greedy and beam) is checked by the
`relative_positions` variant of tests/models/test_transformer.py.
"""

from __future__ import annotations

from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.models import (
    ImageTransformerConfig,
    ImageTransformerStack,
    TransformerConfig,
    build_image_transformer,
    build_transformer,
    image_bits_per_dim,
    presets,
)
from tests.models.test_image_transformer import _images, _numpy, _raster, tiny_config
from tests.models.test_transformer import LABELS, SOURCE, TARGET

RELATIVE = {"attention_settings": {"relative_positions": 2, "relative_values": True}}


def _relative_names(model: keras.Model) -> list[str]:
    return sorted({v.path for v in model.weights if "relative" in v.path})


# -------------------------------------------------------------- the setting
def test_text_config_round_trip_and_old_configs_default_to_none():
    config = presets["tiny"].replace(**RELATIVE)
    assert TransformerConfig.from_json(config.to_json()) == config
    stored = presets["tiny"].to_dict()
    del stored["attention_settings"]
    old = TransformerConfig.from_dict(stored)
    assert old.attention_settings == kt.layers.AttentionSettings()
    # Off: the variables (names and count) of a model without the setting.
    plain = build_transformer(old)
    assert _relative_names(plain) == []
    relative = build_transformer(config)
    # One a^K and one a^V per self-attention layer (2 encoder, 2 decoder),
    # none in cross-attention.
    names = _relative_names(relative)
    assert len(names) == 8
    assert not any("cross_attention" in name for name in names)
    extra = 2 * (2 * 2 + 1) * config.head_key_dim * 4
    assert relative.count_params() == plain.count_params() + extra
    assert sorted(v.path for v in relative.weights if "relative" not in v.path) == (
        sorted(v.path for v in plain.weights)
    )


def test_image_config_round_trip_and_old_configs_default_to_none():
    config = tiny_config("dmol", "full", **RELATIVE)
    assert ImageTransformerConfig.from_json(config.to_json()) == config
    stored = tiny_config("dmol", "full").to_dict()
    del stored["attention_settings"]
    old = ImageTransformerConfig.from_dict(stored)
    assert old.attention_settings == kt.layers.AttentionSettings()
    assert _relative_names(build_image_transformer(old)) == []


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"relative_positions": -2}, r"`model.attention_settings.relative_posit"),
        ({"relative_positions": 1.5}, r"model.attention_settings.relative_positions"),
        ({"relative_positions": True}, r"attention_settings.relative_positions=True"),
        ({"relative_values": True}, r"`model.attention_settings.relative_values=T"),
        ({"relative_positions": 2, "relative_values": "yes"}, r"relative_values"),
        ({"num_key_value_heads": 3}, r"^`model.attention_settings.num_key_value_h"),
    ],
)
def test_bad_text_settings_get_one_line(changes, match):
    with pytest.raises(ValueError, match=match) as error:
        presets["tiny"].replace(attention_settings=changes)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"relative_positions": 0}, r"relative_positions` must be a positive"),
        ({"relative_positions": "8"}, r"relative_positions='8'"),
        ({"window": 4}, r"not attention_settings.window"),
        (
            {"num_key_value_heads": 3},
            r"num_key_value_heads=3`? must divide num_heads=2",
        ),
    ],
)
def test_bad_image_settings_get_one_line(changes, match):
    with pytest.raises(ValueError, match=match) as error:
        tiny_config("dmol", "full").replace(attention_settings=changes)
    assert "\n" not in str(error.value)


def test_local_2d_image_attention_refuses_relative_positions():
    with pytest.raises(ValueError, match=r"not 'local_2d'") as error:
        tiny_config("dmol", "full").replace(attention="local_2d", **RELATIVE)
    assert "\n" not in str(error.value)


# --------------------------------------------------------------- text model
def test_a_text_model_with_relative_positions_trains():
    keras.utils.set_random_seed(0)
    config = presets["tiny"].replace(**RELATIVE)
    model = build_transformer(config)
    model.compile(
        optimizer=kt.schedules.paper_adam(
            config.d_model, kt.schedules.OptimizerConfig(warmup_steps=20)
        ),
        loss=kt.losses.MaskedSparseCrossEntropy(),
    )
    # Slots built before fit, not inside its first traced step (which
    # Keras would then trace twice): the same updates, about 5 s sooner.
    model.optimizer.build(model.trainable_variables)
    history = model.fit([SOURCE, TARGET], LABELS, epochs=15, verbose=0)
    losses = history.history["loss"]
    assert losses[-1] < 0.6 * losses[0]
    # The relative embeddings were trained too.
    layer = model.get_layer("decoder_block_0").self_attention
    assert np.abs(_numpy(layer.relative_value_embeddings)).max() > 0


@pytest.mark.tensorflow_only  # the decoding package is TensorFlow
@pytest.mark.parametrize("jit_compile", [False, True])
def test_cached_greedy_search_equals_the_uncached_search(jit_compile):
    """The search loop (KV caches, static shapes under XLA) picks the tokens
    of the decoder re-run on the whole prefix at every step."""
    from keras_transformer.decoding import Decoder, DecodeSettings

    keras.utils.set_random_seed(3)
    model = build_transformer(presets["tiny"].replace(**RELATIVE))
    greedy = DecodeSettings(method="greedy")
    settings = {"max_length": 8, "end_id": None}
    cached = Decoder(model, jit_compile=jit_compile).decode(SOURCE, greedy, **settings)
    uncached = Decoder(model, use_cache=False).decode(SOURCE, greedy, **settings)
    np.testing.assert_array_equal(_numpy(cached.token_ids), _numpy(uncached.token_ids))
    # The summed log-probabilities: every step's distribution agrees.
    np.testing.assert_allclose(
        _numpy(cached.scores), _numpy(uncached.scores), atol=1e-4
    )


@pytest.mark.tensorflow_only  # a SavedModel
def test_the_export_translates_like_the_library(tmp_path: Path):
    """A SavedModel of a model with relative positions gives the
    translations of `translate_lines` (beam search in this process)."""
    from keras_transformer import export
    from keras_transformer.data import SubwordTokenizer, synthetic_dates
    from keras_transformer.translation import translate_lines
    from tests.export_helpers import served_translations

    keras.utils.set_random_seed(0)
    pairs = synthetic_dates(200, seed=0)
    tokenizer = SubwordTokenizer.train(
        [*pairs.sources, *pairs.targets], vocabulary_size=100
    )
    config = presets["tiny"].replace(
        vocabulary_size=tokenizer.vocabulary_size,
        num_encoder_layers=1,
        num_decoder_layers=1,
        d_model=16,
        d_ff=32,
        num_heads=2,
        **RELATIVE,
    )
    model = build_transformer(config)
    sentences = synthetic_dates(4, seed=3).sources
    path = export.export_translator(model, tokenizer, tmp_path / "1")
    loaded = tf.saved_model.load(str(path))
    expected = translate_lines(model, tokenizer, sentences)
    assert served_translations(loaded, sentences) == expected
    assert any(expected)


# -------------------------------------------------------------- image model
@pytest.mark.parametrize("output", ["categorical", "dmol"])
@pytest.mark.parametrize("attention", ["full", "local_1d"])
def test_image_cached_step_equals_the_forward_pass(output, attention):
    """Distances in the generation order (raster order for these kinds)."""
    keras.utils.set_random_seed(5)
    config = tiny_config(output, attention, num_classes=3, **RELATIVE)
    model = build_image_transformer(config)
    assert len(_relative_names(model)) == 2 * config.num_layers
    images, labels = _images(), np.array([2, 0])
    full = _numpy(model({"images": images, "labels": labels}))
    full = full.reshape(2, config.num_positions, -1)
    stack = ImageTransformerStack.of(model)
    values = _raster(images, output == "categorical")
    caches = stack.init_cache(2)
    steps = stack.generation_positions.tolist()
    for step, index in enumerate(steps):
        previous = values[:, steps[max(step - 1, 0)]]
        outputs, caches = stack.decode_beam_step(
            previous[:, None], caches, index, labels
        )
        np.testing.assert_allclose(_numpy(outputs)[:, 0], full[:, index], atol=5e-5)


def test_image_model_with_relative_positions_trains_and_reloads(tmp_path: Path):
    keras.utils.set_random_seed(9)
    config = tiny_config("dmol", "local_1d", **RELATIVE)
    model = build_image_transformer(config)
    stack = ImageTransformerStack.of(model)
    images = _images(4)
    before = image_bits_per_dim(model, images)
    model.compile(
        optimizer=kt.optimizers.Adam(1e-2),
        loss=lambda target, params: stack.head.bits_per_dim(
            params, keras.ops.cast(target, "int32")
        ),
    )
    model.optimizer.build(model.trainable_variables)  # as in the text test
    model.fit(images, images, epochs=10, batch_size=4, verbose=0)
    assert image_bits_per_dim(model, images) < before
    # The trained weights in a .keras file (an uncompiled copy: the loss
    # above is a lambda).
    trained = build_image_transformer(config)
    trained.set_weights(model.get_weights())
    path = tmp_path / "image.keras"
    trained.save(path)
    restored = keras.models.load_model(path)
    assert len(_relative_names(restored)) == 2 * config.num_layers
    np.testing.assert_allclose(
        _numpy(restored(images)), _numpy(model(images)), atol=1e-6
    )
